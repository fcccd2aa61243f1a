"""CatBoost frontend: what the conformance cases do not cover: refusals with typed errors,
files through peregrine.compile and the CLI, every backend on one model. Exactness per loss and
tree kind is in tests/conformance/cases_catboost.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import peregrine
from peregrine.errors import NotFittedError, UnsupportedModelError

cb = pytest.importorskip("catboost")

BACKENDS = ["reference", "torch", "torchscript", "native"]
COMMON = dict(verbose=0, random_seed=0, thread_count=1, allow_writing_files=False)
rng = np.random.default_rng(0)
X = rng.normal(size=(400, 5))
X[::7, 2] = np.nan
y = (np.nan_to_num(X[:, 0]) + X[:, 1] > 0).astype(int)


def _rows():
    rows = rng.normal(size=(300, 5)) * 2
    rows[::5, 2] = np.nan
    rows[1, 0], rows[2, 1] = np.inf, -np.inf
    return rows


@pytest.fixture(scope="module")
def clf():
    return cb.CatBoostClassifier(iterations=60, depth=6, **COMMON).fit(X, y)


@pytest.mark.parametrize("backend", BACKENDS)
def test_classifier_every_backend(clf, backend):
    rows = _rows()
    compiled = peregrine.compile(clf, backend=backend)
    np.testing.assert_array_equal(compiled.predict(rows), clf.predict(rows))
    np.testing.assert_allclose(compiled.predict_proba(rows), clf.predict_proba(rows),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(compiled.predict_proba(rows.astype(np.float32)),
                               clf.predict_proba(rows.astype(np.float32)), rtol=1e-5, atol=1e-6)


def test_saved_files_compile(clf, tmp_path):
    rows = _rows()
    clf.save_model(str(tmp_path / "m.cbm"))
    clf.save_model(str(tmp_path / "m.json"), format="json")
    for name in ("m.cbm", "m.json"):
        compiled = peregrine.compile(str(tmp_path / name), backend="reference")
        np.testing.assert_array_equal(compiled.predict(rows), clf.predict(rows))


def test_cli_compiles_cbm(clf, tmp_path, capsys):
    from peregrine.cli import main

    clf.save_model(str(tmp_path / "m.cbm"))
    code = main(["compile", str(tmp_path / "m.cbm"), "-o", str(tmp_path / "m.pgn"),
                 "--backend", "reference"])
    assert code == 0, capsys.readouterr().err
    assert "catboost-cbm" in capsys.readouterr().out
    loaded = peregrine.load(tmp_path / "m.pgn")
    rows = _rows()
    np.testing.assert_allclose(loaded.predict_proba(rows), clf.predict_proba(rows), rtol=1e-5,
                               atol=1e-6)


def test_feature_names_match_columns(clf):
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(5)])
    model = cb.CatBoostRegressor(iterations=10, depth=3, **COMMON).fit(df, X[:, 0] * 0 + y)
    compiled = peregrine.compile(model, backend="reference")
    np.testing.assert_allclose(compiled.predict(df), model.predict(df), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("one_hot_max_size", [2, 255])
def test_categorical_features_refused(one_hot_max_size):
    df = pd.DataFrame({"a": rng.normal(size=200), "c": rng.choice(["x", "y", "z"], 200)})
    target = (df.a > 0).astype(int)
    model = cb.CatBoostClassifier(iterations=5, depth=3, cat_features=["c"],
                                  one_hot_max_size=one_hot_max_size, **COMMON).fit(df, target)
    with pytest.raises(UnsupportedModelError, match="categorical features.*c"):
        peregrine.compile(model, backend="reference")


def test_text_features_refused():
    texts = rng.choice(["good movie", "bad film", "great plot", "awful acting"], 200)
    df = pd.DataFrame({"a": rng.normal(size=200), "t": texts})
    target = np.array(["good" in t or "great" in t for t in texts], dtype=int)
    model = cb.CatBoostClassifier(iterations=5, depth=3, text_features=["t"],
                                  **COMMON).fit(df, target)
    with pytest.raises(UnsupportedModelError, match="text features"):
        peregrine.compile(model, backend="reference")


def test_unfitted_refused():
    with pytest.raises(NotFittedError, match="not fitted"):
        peregrine.compile(cb.CatBoostRegressor(), backend="reference")


def test_custom_probability_threshold_refused(clf):
    model = clf.copy()
    model.set_probability_threshold(0.3)
    with pytest.raises(UnsupportedModelError, match="probability threshold"):
        peregrine.compile(model, backend="reference")
