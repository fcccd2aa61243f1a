"""CatBoost CTRs over feature combinations and every CTR type, against CatBoost's own predict.

CatBoost's default max_ctr_complexity is 4 from 200 iterations on (below that it picks 1), so
the "default" model trains 200 iterations with no CTR option; the others ask for combinations
with max_ctr_complexity. Rows hold NaN in the numeric columns, categories unseen in training
and strings, integers and pandas categories in the categorical columns."""

from __future__ import annotations

import json
import tempfile

import numpy as np
import pandas as pd
import pytest

import peregrine
from peregrine.frontends.catboost_combos import Projection, decode, decode_all, key_of
from peregrine.frontends.catboost_ctr import gt_float32_threshold

cb = pytest.importorskip("catboost")

BACKENDS = ["reference", "torch", "torchscript", "native"]
COMMON = dict(verbose=0, random_seed=0, thread_count=1, allow_writing_files=False)
WORDS = [f"w{i}" for i in range(30)] + ["a" * 70, "Ünïcode"]


def _frame(n, seed, n_cats=3, unseen=False):
    r = np.random.default_rng(seed)
    extra = ["never", "seen"] if unseen else []
    df = pd.DataFrame({
        "a": r.normal(size=n),
        "c": r.choice(["x", "y", "z"] + extra, n),
        "d": r.choice(WORDS[:25] + extra, n),
        "e": r.choice([1, 2, 3, 4] + ([7] if unseen else []), n),
        "b": r.normal(size=n),
        "f": r.choice(WORDS[20:] + extra, n),
    })
    df.loc[::9, "a"] = np.nan
    df.loc[::13, "b"] = np.nan
    return df[["a", "c", "d", "e", "b", "f"][: 2 + n_cats] if n_cats < 4 else list(df)]


def _key(df):
    d = df.d.map({w: i for i, w in enumerate(WORDS)}).fillna(0)
    return (d * 7 + df.e * 3 + (df.c == "x")) % 5


def _cat_names(df):
    return [c for c in df.columns if c not in ("a", "b")]


def _train(kind, n_cats=3, **kw):
    df = _frame(3000, 6, n_cats)
    key = _key(df)
    params = dict(depth=6, iterations=60, cat_features=_cat_names(df), **COMMON)
    params.update(kw)
    if kind == "binary":
        return cb.CatBoostClassifier(**params).fit(df, ((key >= 2) ^ (df.a > 0.3)).astype(int))
    if kind == "multiclass":
        return cb.CatBoostClassifier(loss_function="MultiClass", **params).fit(
            df, np.minimum(key, 2).astype(int))
    if kind == "regressor":
        return cb.CatBoostRegressor(**params).fit(df, key + df.b.fillna(0))
    group = np.repeat(np.arange(len(df) // 20), 20)
    return cb.CatBoostRanker(**params).fit(df, key + (df.a > 0), group_id=group)


MODELS = {
    # CatBoost's defaults for CTRs (Borders + Counter, complexity 4 at 200 iterations)
    "binary-default": lambda: _train("binary", iterations=200),
    "multiclass": lambda: _train("multiclass", max_ctr_complexity=4),
    "regressor": lambda: _train("regressor", max_ctr_complexity=4),
    "ranker": lambda: _train("ranker", max_ctr_complexity=3),
    "binary-4cats-nan-max": lambda: _train("binary", n_cats=4, nan_mode="Max",
                                           max_ctr_complexity=4),
    "regressor-target-mean-buckets": lambda: _train(
        "regressor", max_ctr_complexity=3,
        simple_ctr=["BinarizedTargetMeanValue", "Buckets", "Counter"],
        combinations_ctr=["BinarizedTargetMeanValue", "Counter"]),
    "multiclass-borders-buckets": lambda: _train(
        "multiclass", max_ctr_complexity=2,
        simple_ctr=["Borders:TargetBorderCount=2:Prior=0.3/1", "Buckets:Prior=2/1"],
        combinations_ctr=["Borders:TargetBorderCount=2", "Buckets"]),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request):
    return request.param, MODELS[request.param]()


def _uses_combinations(model):
    """Whether a CTR split of the model reads more than one element (else the test is moot)."""
    with tempfile.TemporaryDirectory() as tmp:
        model.save_model(f"{tmp}/m.json", format="json")
        raw = json.load(open(f"{tmp}/m.json"))
    return any(len(c["elements"]) > 1 for c in raw["features_info"].get("ctrs") or [])


def _check(compiled, model, rows):
    """The library's tolerance (rtol 1e-5, atol 1e-6) and, as measured, within 1e-12."""
    if hasattr(model, "predict_proba"):
        np.testing.assert_array_equal(np.ravel(compiled.predict(rows)),
                                      np.ravel(model.predict(rows)))
        got, want = compiled.predict_proba(rows), model.predict_proba(rows)
    else:  # regressors and rankers: the raw formula value
        got, want = compiled.predict(rows), model.predict(rows)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def _rows(model):
    n_cats = len(model.get_cat_feature_indices())
    return _frame(300, 1, n_cats), _frame(200, 2, n_cats, unseen=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_combination_ctrs_every_backend(model, backend):
    name, model = model
    assert _uses_combinations(model), f"{name}: no combination CTR to test"
    compiled = peregrine.compile(model, backend=backend)
    for rows in _rows(model):
        _check(compiled, model, rows)
        _check(compiled, model, rows.iloc[:1])  # one row: the few-rows paths
    if backend == "reference":  # the input boundary is the runtime's, the same for all
        cats = _cat_names(rows)
        _check(compiled, model, rows.astype({c: "category" for c in cats}))
        _check(compiled, model, rows.to_numpy(dtype=object))


@pytest.mark.parametrize("name", [
    "binary-default",
    pytest.param("multiclass", marks=pytest.mark.slow),
    pytest.param("regressor-target-mean-buckets", marks=pytest.mark.slow),
    pytest.param("binary-4cats-nan-max", marks=pytest.mark.slow),
])
def test_combination_ctrs_tvm(name):
    pytest.importorskip("tvm")
    model = MODELS[name]()
    compiled = peregrine.compile(model, backend="tvm")
    for rows in _rows(model):
        _check(compiled, model, rows)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS + ["tvm"])
def test_fully_default_classifier(backend):
    """CatBoostClassifier(cat_features=...) with every other parameter CatBoost's default
    (1000 iterations, complexity 4) and two of its four categorical features interacting."""
    if backend == "tvm":
        pytest.importorskip("tvm")
    df = _frame(3000, 6, 4)
    target = ((_key(df) >= 2) ^ (df.f.isin(WORDS[25:]))).astype(int)
    model = cb.CatBoostClassifier(cat_features=_cat_names(df), **COMMON).fit(df, target)
    assert _uses_combinations(model)
    compiled = peregrine.compile(model, backend=backend)
    for rows in _rows(model):
        _check(compiled, model, rows)


def test_artifact_roundtrip(tmp_path):
    model = MODELS["binary-default"]()
    compiled = peregrine.compile(model, backend="reference")
    compiled.save(tmp_path / "m.pgn")
    loaded = peregrine.load(tmp_path / "m.pgn")
    for rows in _rows(model):
        _check(loaded, model, rows)


def test_saved_json_compiles(tmp_path):
    model = MODELS["regressor"]()
    model.save_model(str(tmp_path / "m.json"), format="json")
    compiled = peregrine.compile(str(tmp_path / "m.json"), backend="reference")
    for rows in _rows(model):
        np.testing.assert_allclose(compiled.predict(rows), model.predict(rows), rtol=0,
                                   atol=1e-12)


@pytest.mark.parametrize("n", [1, 5, 300])
@pytest.mark.parametrize("kind", ["object", "arrow", "numpy"])
@pytest.mark.parametrize("bad", [None, np.nan])
def test_missing_category_refused(n, kind, bad):
    """CatBoost refuses None and NaN in cat_features; so does the input boundary, whichever
    path hashes the column (value by value for a few rows, Arrow's dictionary encoding,
    pandas.factorize)."""
    from peregrine.errors import InputError

    model = MODELS["binary-default"]()
    rows = _frame(n, 8).astype({"d": object})
    rows.loc[n // 2, "d"] = bad
    with pytest.raises((cb.CatBoostError, TypeError)):
        model.predict(rows)
    if kind == "arrow":
        rows = rows.astype({"d": "string[pyarrow]"})
    compiled = peregrine.compile(model, backend="native")
    with pytest.raises(InputError):
        compiled.predict(rows.to_numpy(dtype=object) if kind == "numpy" else rows)


def test_hash_paths_agree():
    """Arrow dictionary encoding, pandas.factorize, the value-by-value path and the hash cache
    give each string CatBoost's hash."""
    from peregrine.runtime.cat_hash import CATBOOST_HASH, city_hash64, hash_column

    values = np.array(WORDS * 5 + ["", "é" * 40, "x" * 100], dtype=object)
    want = np.array([city_hash64(v.encode()) & 0xFFFFFFFF for v in values], dtype=np.float64)
    for column in (pd.Series(values), pd.Series(values, dtype="string[pyarrow]"), values,
                   values[:3], pd.Series(values[:3], dtype="string[pyarrow]")):
        np.testing.assert_array_equal(hash_column(column, CATBOOST_HASH, "c"),
                                      want[:len(column)])


# --- the key decoder on its own ------------------------------------------------------------

def _signed(r, n):
    return [int(v) for v in r.integers(-(1 << 31), 1 << 31, size=n)]


def test_decode_recovers_every_tuple():
    """Three features, two float bits; the first feature's set unknown (solved by the 32-bit
    range), the middle one's too when the first is known (solved at the meeting point)."""
    r = np.random.default_rng(0)
    v0, v1, v2 = _signed(r, 40), _signed(r, 7), _signed(r, 11)
    tuples = {(a, b, c, x, y) for a, b, c, x, y in zip(
        r.choice(v0, 500), r.choice(v1, 500), r.choice(v2, 500), r.integers(0, 2, 500),
        r.integers(0, 2, 500))}
    tuples = sorted(tuples)
    keys = np.array([key_of(t[:3], t[3:]) for t in tuples], dtype=np.uint64)
    proj = Projection((0, 1, 2), 2)
    for known in ({1: v1, 2: v2}, {0: v0, 2: v2}, {0: v0, 1: v1, 2: v2}):
        rows = decode(proj, keys, {f: np.array(v) for f, v in known.items()})
        found = {(int(i), tuple(int(x) for x in row)) for i, *row in rows}
        assert found == {(i, t) for i, t in enumerate(tuples)}
    assert decode(proj, keys, {2: np.array(v2)}) is None  # two unknowns: not yet


def test_decode_all_learns_sets_across_tables():
    r = np.random.default_rng(1)
    v0, v1 = _signed(r, 12), _signed(r, 9)
    single = np.array([key_of([b], []) for b in v1], dtype=np.uint64)
    pairs = [(a, b) for a in v0 for b in v1 if r.random() < 0.5]
    combo = np.array([key_of(list(p), []) for p in pairs], dtype=np.uint64)
    # features (2, 1, 0): 2 first (range-solved), 1 known from "single", 0 only from "pair"
    triple = [(a + 1, b, a) for a, b in pairs]
    combo3 = np.array([key_of(list(t), []) for t in triple], dtype=np.uint64)
    projs = {"triple": Projection((2, 1, 0), 0), "pair": Projection((0, 1), 0),
             "single": Projection((1,), 0)}
    out = decode_all(projs, {"single": single, "pair": combo, "triple": combo3})
    assert sorted(tuple(x) for x in out["pair"][:, 1:].tolist()) == sorted(pairs)
    assert sorted(tuple(x) for x in out["triple"][:, 1:].tolist()) == sorted(triple)


def test_decode_all_refuses_what_no_table_teaches():
    r = np.random.default_rng(2)
    v0, v1, v2 = _signed(r, 5), _signed(r, 5), _signed(r, 5)
    keys = np.array([key_of([a, b, c], []) for a in v0 for b in v1 for c in v2],
                    dtype=np.uint64)
    with pytest.raises(ValueError, match="no table gives the categories"):
        decode_all({"t": Projection((0, 1, 2), 0)}, {"t": keys})


def test_float32_border_threshold():
    """x > t (float64) decides as CatBoost's float32(x) > float32(border), at every rounding
    edge around the border."""
    r = np.random.default_rng(3)
    borders = np.concatenate([r.normal(size=200).astype(np.float32), np.float32([
        0.0, 1.0, -1.0, 1e-40, np.finfo(np.float32).max, -np.finfo(np.float32).max])])
    for b in borders:
        t = gt_float32_threshold(float(b))
        with np.errstate(over="ignore"):
            nxt = np.nextafter(b, np.float32(np.inf))
        mid = (float(b) + float(nxt)) / 2 if np.isfinite(nxt) else float(b) * (1 + 2**-25)
        xs = [float(b), float(nxt), mid, np.nextafter(mid, -np.inf), np.nextafter(mid, np.inf),
              np.nextafter(float(b), np.inf), np.nextafter(float(b), -np.inf), t]
        for x in xs:
            with np.errstate(over="ignore"):
                assert (x > t) == (np.float32(x) > b), (b, x, t)


def test_interp_positional_tables_match_numpy():
    """INTERP's rule reads a table with xp = 0..n-1 by position (the CTR lookups'
    dense tables); every other x (fractions, NaN, +-inf, -0.0, outside) must still get exactly
    np.interp's answer."""
    from peregrine.ir.semantics.transformers import Interp

    r = np.random.default_rng(3)
    fp = r.normal(size=50)
    x = np.concatenate([np.arange(-3, 53, dtype=np.float64), r.uniform(-5, 55, 200),
                        [np.nan, np.inf, -np.inf, -0.0, 49.0, 49.5, 1e300, -1e300, 2.0**63]])
    xp = np.arange(50, dtype=np.float64)
    op = Interp(xp=(xp, xp + 0.25), fp=(fp, fp), left=np.array([-7.0, 1.0]),
                right=np.array([9.0, 2.0]))
    got = op.rule(None, [np.column_stack([x, x])], None)
    for j, shift in enumerate((0.0, 0.25)):
        want = np.interp(x, xp + shift, fp, left=op.left[j], right=op.right[j])
        np.testing.assert_array_equal(got[:, j], want)


def test_torch_interp_positional_tables_match_numpy():
    """The torch lowering's read by position (every table xp = 0..n-1), against np.interp."""
    torch = pytest.importorskip("torch")
    from peregrine.backends.torch.ops_transformers import Interp

    r = np.random.default_rng(4)
    fps = [r.normal(size=50), r.normal(size=7)]
    x = np.concatenate([np.arange(-3, 53, dtype=np.float64), r.uniform(-5, 55, 200),
                        [np.nan, np.inf, -np.inf, -0.0, 6.0, 6.5, 1e300, -1e300, 2.0**63]])
    xps = [np.arange(len(f), dtype=np.float64) for f in fps]
    left, right = np.array([-7.0, 1.0]), np.array([9.0, 2.0])
    module = Interp(xps, fps, left, right)
    assert module.positional
    for cols in (np.stack([x, x]), np.stack([np.arange(40.0), np.arange(40.0) % 7])):
        got = module.columns(torch.from_numpy(cols)).numpy()
        for j in range(2):
            want = np.interp(cols[j], xps[j], fps[j], left=left[j], right=right[j])
            np.testing.assert_array_equal(got[j], want)
