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


CATS = [f"cat{i}" for i in range(25)] + ["a" * 70, "Ünïcode", "1"]  # >64 bytes, UTF-8


def _cat_frame(n, seed, unseen=False):
    r = np.random.default_rng(seed)
    extra = ["never", "seen"] if unseen else []
    return pd.DataFrame({
        "a": r.normal(size=n),
        "c": r.choice(["x", "y", "z"] + extra, n),
        "d": r.choice(CATS + extra, n),
        "e": r.choice([1, 2, 3, 4] + ([7] if unseen else []), n),
    })


def _cat_target(df):
    return ((df.a > 0) ^ (df.c == "x") ^ df.d.isin(CATS[:8]) ^ (df.e == 2)).astype(int)


def _cat_model(cls=None, **kw):
    df = _cat_frame(800, 1)
    target = _cat_target(df)
    if kw.get("loss_function") == "MultiClass":
        target = target + (df.e == 1)
    if cls is cb.CatBoostRegressor:
        target = target + df.a
    cls = cls or cb.CatBoostClassifier
    return cls(iterations=60, depth=5, cat_features=["c", "d", "e"], **COMMON, **kw).fit(
        df, target)


CAT_MODELS = {
    "one-hot": dict(one_hot_max_size=255),
    "ctr": dict(max_ctr_complexity=1),
    "ctr-default-complexity": dict(),
    "ctr-multiclass": dict(loss_function="MultiClass", max_ctr_complexity=1),
    "ctr-regressor": dict(cls=cb.CatBoostRegressor, max_ctr_complexity=1),
}


@pytest.fixture(scope="module", params=sorted(CAT_MODELS))
def cat_model(request):
    return _cat_model(**CAT_MODELS[request.param])


def _check_same(compiled, model, rows):
    if not hasattr(model, "predict_proba"):
        np.testing.assert_allclose(compiled.predict(rows), model.predict(rows), rtol=1e-5,
                                   atol=1e-6)
    else:
        np.testing.assert_array_equal(np.ravel(compiled.predict(rows)),
                                      np.ravel(model.predict(rows)))
        np.testing.assert_allclose(compiled.predict_proba(rows), model.predict_proba(rows),
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_categorical_every_backend(cat_model, backend):
    """One-hot and CTR splits (single-feature CTRs; the default max_ctr_complexity compiles
    when its model uses no combination) on training-like rows, unseen categories, strings,
    integers, pandas category dtype and numpy object arrays."""
    compiled = peregrine.compile(cat_model, backend=backend)
    for rows in (_cat_frame(800, 1), _cat_frame(500, 2, unseen=True)):
        _check_same(compiled, cat_model, rows)
        as_category = rows.astype({"c": "category", "d": "category"})
        _check_same(compiled, cat_model, as_category)
        _check_same(compiled, cat_model, rows.to_numpy(dtype=object))


def test_categorical_prediction_raw_values(cat_model):
    rows = _cat_frame(400, 3, unseen=True)
    compiled = peregrine.compile(cat_model, backend="reference")
    if hasattr(cat_model, "predict_proba"):
        got, want = compiled.predict_proba(rows), cat_model.predict_proba(rows)
    else:
        got, want = compiled.predict(rows), cat_model.predict(rows)
    assert np.abs(got - want).max() <= 1e-12


def test_categorical_artifact_roundtrip(tmp_path):
    model = _cat_model(max_ctr_complexity=1)
    compiled = peregrine.compile(model, backend="reference")
    compiled.save(tmp_path / "m.pgn")
    loaded = peregrine.load(tmp_path / "m.pgn")
    assert loaded.spec.hash_columns == {1: "catboost-city64-low32", 2: "catboost-city64-low32",
                                        3: "catboost-city64-low32"}
    _check_same(loaded, model, _cat_frame(300, 4, unseen=True))


def test_catboost_hash_matches_catboost(tmp_path):
    """CityHash64 v1.0.2 low 32 bits: against the one-hot values CatBoost stores (strings of
    every CityHash length class) and CatBoost's own Python export ("Female", "1")."""
    import json

    from peregrine.runtime.cat_hash import catboost_hash

    values = ["x", "abcd", "a" * 12, "c" * 20, "b" * 40, "a" * 70, "z" * 200, "Ünïcode"]
    df = pd.DataFrame({"c": np.repeat(values, 30)})
    target = np.tile([0, 1], len(df) // 2) ^ (df.c.to_numpy() == "abcd")
    model = cb.CatBoostClassifier(iterations=30, depth=3, cat_features=["c"],
                                  one_hot_max_size=255, **COMMON).fit(df, target)
    model.save_model(str(tmp_path / "h.json"), format="json")
    stored = json.load(open(tmp_path / "h.json"))["features_info"]["categorical_features"][0]
    ours = {int(np.uint32(catboost_hash(v)).astype(np.int32)) for v in values}
    assert stored["values"] and set(stored["values"]) <= ours
    assert catboost_hash("1") == catboost_hash(1) == catboost_hash(True) == 1121341681
    assert int(np.uint32(catboost_hash("Female")).astype(np.int32)) == -2114564283


@pytest.mark.parametrize("bad", [None, np.nan, 1.5])
def test_missing_or_float_category_refused(bad):
    """CatBoost itself refuses None/NaN/floats in cat_features ("must be integer or string")."""
    from peregrine.errors import InputError

    model = _cat_model(one_hot_max_size=255)
    rows = _cat_frame(5, 5).astype({"c": object})
    rows.loc[2, "c"] = bad
    with pytest.raises((cb.CatBoostError, TypeError)):
        model.predict(rows)
    compiled = peregrine.compile(model, backend="reference")
    with pytest.raises(InputError, match="'c'"):
        compiled.predict(rows)


def test_ctr_combinations_compile():
    """max_ctr_complexity=2 on interacting features: combination CTRs (tests/test_catboost_ctr.py
    has the matrix)."""
    df = _cat_frame(3000, 6)
    key = (df.d.map({c: i for i, c in enumerate(CATS)}) * 7 + df.e * 3) % 5
    model = cb.CatBoostClassifier(iterations=60, depth=6, cat_features=["c", "d", "e"],
                                  max_ctr_complexity=2, **COMMON).fit(df, (key >= 2).astype(int))
    compiled = peregrine.compile(model, backend="reference")
    _check_same(compiled, model, _cat_frame(400, 7, unseen=True))


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
