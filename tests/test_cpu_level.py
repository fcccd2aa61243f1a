"""The forced-CPU-level switch (``PEREGRINE_CPU_LEVEL``, ``python -m peregrine.tools.cpu_level``)
that lets one AVX-512 machine run the code paths of AVX2 and SSE4.2 CPUs."""

import os
import subprocess
import sys

import pytest

from peregrine import config
from peregrine.tools.cpu_level import host_level, level_env, levels_below_host

PROBE = """
import numpy as np, torch
from sklearn.ensemble import RandomForestClassifier
import peregrine
from peregrine.kernels.jit import Target
t = Target.host()
print(t.cpu, t.isa, t.simd_bytes, torch.backends.cpu.get_cpu_capability())
rng = np.random.default_rng(0)
X = rng.normal(size=(500, 5)).astype(np.float32)
m = RandomForestClassifier(5, max_depth=5, random_state=0).fit(X, X[:, 0] > 0)
c = peregrine.compile(m, "native")
assert t.cpu in c.explain(), c.explain()
np.testing.assert_array_equal(c.predict_proba(X), m.predict_proba(X))
"""


def test_unknown_level_is_refused(monkeypatch):
    monkeypatch.setenv("PEREGRINE_CPU_LEVEL", "x86-64-v9")
    with pytest.raises(ValueError, match="x86-64-v3"):
        config.cpu_level()
    monkeypatch.setenv("PEREGRINE_CPU_LEVEL", "native")
    assert config.cpu_level() is None


@pytest.mark.parametrize("level, isa, simd, aten", [("x86-64-v3", "avx2", 32, "AVX2"),
                                                     ("x86-64-v2", "generic", 16, "DEFAULT")])
def test_forced_level_reaches_native_code_and_torch(level, isa, simd, aten, tmp_path):
    env = {**os.environ, "PEREGRINE_CACHE_DIR": str(tmp_path)}
    env.pop("PEREGRINE_CPU_LEVEL", None)
    out = subprocess.run([sys.executable, "-m", "peregrine.tools.cpu_level", level, "--",
                          sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [level, isa, str(simd), aten]
    # every library switch the level names is set for the command
    assert set(level_env(level)) >= {"PEREGRINE_CPU_LEVEL", "ATEN_CPU_CAPABILITY",
                                      "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS",
                                      "OPENBLAS_CORETYPE"}


V2 = "+cx16,+popcnt,+sahf,+sse3,+sse4.1,+sse4.2,+ssse3,+sse2"
V3 = V2 + ",+avx,+avx2,+bmi,+bmi2,+f16c,+fma,+lzcnt,+movbe,+xsave"
V4 = V3 + ",+avx512f,+avx512bw,+avx512cd,+avx512dq,+avx512vl"


@pytest.mark.parametrize("features, host, below", [
    (V4 + ",+avx512vbmi", "x86-64-v4", ["x86-64-v3", "x86-64-v2"]),  # Rocket Lake, Zen 4
    (V3 + ",+vaes,+sha", "x86-64-v3", ["x86-64-v2"]),  # Zen 3: AVX2, no AVX-512
    (V3.replace("+fma", "-fma"), "x86-64-v2", []),  # AVX2 without FMA is not v3
    (V3 + ",+avx512f", "x86-64-v3", ["x86-64-v2"]),  # AVX-512F alone is not v4
    ("+sse2,+sse3", None, []),
    ("", None, []),
])
def test_levels_below_host(features, host, below):
    """`make test-cpu-levels` forces the levels below the host's: on an AVX2 host the v3 run
    would repeat the host's own code paths."""
    assert host_level(features) == host
    assert levels_below_host(features) == below


def test_below_host_lists_this_machine(monkeypatch):
    monkeypatch.setenv("PEREGRINE_CPU_LEVEL", "x86-64-v2")  # the machine, not the forced level
    out = subprocess.run([sys.executable, "-m", "peregrine.tools.cpu_level", "--below-host"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == levels_below_host()
    assert set(out.stdout.split()) <= set(config.CPU_LEVELS)
