"""The forced-CPU-level switch (``PEREGRINE_CPU_LEVEL``, ``python -m peregrine.tools.cpu_level``)
that lets one AVX-512 machine run the code paths of AVX2 and SSE4.2 CPUs."""

import os
import subprocess
import sys

import pytest

from peregrine import config
from peregrine.tools.cpu_level import level_env

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
