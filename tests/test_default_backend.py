"""The default backend, "auto": the fastest installed backend for the device (native on a CPU,
torch on CUDA), re-picked when a compiled model moves device."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.ensemble import RandomForestClassifier

import peregrine
from peregrine import UnsupportedModelError
from peregrine.backends import available_backends, resolve_auto

HAVE_CUDA = False
try:
    import torch

    HAVE_CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover - torch is a core dependency
    pass


@pytest.fixture(scope="module")
def model_and_rows():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 6))
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    X[:4, 2] = [np.nan, 1e30, -1e30, -0.0]  # the forest accepts NaN (not infinity)
    model = RandomForestClassifier(n_estimators=8, max_depth=5, random_state=0).fit(X[4:], y[4:])
    return model, X


def test_the_default_is_native_on_a_cpu(model_and_rows):
    model, X = model_and_rows
    compiled = peregrine.compile(model)
    want = "native" if "native" in available_backends() else resolve_auto("cpu")
    assert compiled.backend == want == resolve_auto("cpu")
    assert compiled.auto_backend
    np.testing.assert_array_equal(compiled.predict(X), model.predict(X))
    np.testing.assert_allclose(compiled.predict_proba(X), model.predict_proba(X),
                               rtol=1e-5, atol=1e-6)
    explicit = peregrine.compile(model, "native")
    assert not explicit.auto_backend
    np.testing.assert_array_equal(compiled.predict_proba(X), explicit.predict_proba(X))


def test_auto_picks_per_device():
    assert resolve_auto("cuda") == "torch"  # the backends that run on CUDA: torch first
    assert resolve_auto("cuda:1") == "torch"
    with pytest.raises(UnsupportedModelError, match="no installed backend runs on 'tpu'"):
        resolve_auto("tpu")


def test_a_cpu_only_backend_refuses_to_move_and_keeps_working(model_and_rows):
    model, X = model_and_rows
    compiled = peregrine.compile(model, "native")
    assert compiled.to("cpu") is compiled  # already there: nothing to move
    assert peregrine.compile(model).to("cpu").backend == resolve_auto("cpu")
    with pytest.raises(UnsupportedModelError, match="backend 'native' runs on cpu"):
        compiled.to("cuda")
    assert compiled.backend == "native" and compiled.device == "cpu"
    np.testing.assert_array_equal(compiled.predict(X), model.predict(X))


@pytest.mark.skipif(HAVE_CUDA, reason="checks the error where CUDA is missing")
def test_auto_without_cuda_says_so_and_keeps_the_cpu_program(model_and_rows):
    model, X = model_and_rows
    compiled = peregrine.compile(model)
    with pytest.raises(UnsupportedModelError, match="CUDA"):
        compiled.to("cuda")
    assert compiled.backend == resolve_auto("cpu") and compiled.device == "cpu"
    np.testing.assert_array_equal(compiled.predict(X), model.predict(X))


@pytest.mark.gpu
def test_auto_moves_to_cuda_as_torch_and_back(model_and_rows):  # pragma: no cover - GPU only
    model, X = model_and_rows
    compiled = peregrine.compile(model)
    cpu_answer = compiled.predict_proba(X)
    compiled.to("cuda")
    assert compiled.backend == "torch" and compiled.device == "cuda"
    np.testing.assert_allclose(compiled.predict_proba(X), cpu_answer, rtol=1e-5, atol=1e-6)
    compiled.to("cpu")
    assert compiled.backend == resolve_auto("cpu")
    np.testing.assert_array_equal(compiled.predict_proba(X), cpu_answer)


def test_load_with_auto_rebuilds_for_the_fastest_backend(model_and_rows, tmp_path):
    model, X = model_and_rows
    compiled = peregrine.compile(model, "reference")
    path = tmp_path / "m.peregrine"
    compiled.save(path)
    assert peregrine.load(path).backend == "reference"  # the saved backend, as before
    loaded = peregrine.load(path, backend="auto")
    assert loaded.backend == resolve_auto("cpu") and loaded.auto_backend
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
