"""One local Spark session per test process, shared by every Spark test (this issue's UDF and
the model-sources issue's Spark ML reader). Import the fixture where it is used:

    from tests.conftest_spark import spark  # noqa: F401

It skips, saying why, only when pyspark or a Java 17+ runtime is missing (``make env`` installs
both). Small and quiet: local[2], no UI, two shuffle partitions."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest


def java_problem() -> str | None:
    """Why Spark cannot start here, or None."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        return "no Java runtime (install default-jre-headless, or run make env)"
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{java} -version failed: {exc}"
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        return f"cannot tell the version of {java}"
    major = int(m.group(1)) if m.group(1) != "1" else int(m.group(2) or 0)
    if major < 17:
        return f"pyspark 4 needs Java 17 or newer; {java} is Java {major}"
    return None


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")
    problem = java_problem()
    if problem:
        pytest.skip(problem)
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("peregrine-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
