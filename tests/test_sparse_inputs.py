"""scipy.sparse input (docs/sparse.md): every method on every backend gives the source library's
own answer on the same sparse matrix, with the library's rule for absent entries (XGBoost:
missing; scikit-learn, LightGBM, CatBoost: 0), stored zeros and stored NaN as the library reads
them, blocks of rows bounded in memory, and the sparse linear path."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import sparse
from sklearn.base import clone

import peregrine
from peregrine.errors import InputError
from peregrine.runtime import sparse as rsparse
from tests.compile_helpers import compile_or_skip  # noqa: E402

BACKENDS = ["reference", "torch", "torchscript", "native", "tvm"]
FORMATS = [sparse.csr_matrix, sparse.csc_matrix, sparse.coo_matrix, sparse.csr_array,
           sparse.csc_array, sparse.coo_array]
RNG = np.random.default_rng(7)


def _data(n=600, d=12, density=0.3, nan=0.0):
    X = RNG.normal(size=(n, d))
    X[RNG.random(X.shape) > density] = 0.0
    if nan:
        X[RNG.random(X.shape) < nan] = np.nan
    y = (np.nan_to_num(X[:, 0]) - np.nan_to_num(X[:, 1]) + 0.3 * np.nan_to_num(X[:, 2])
         > 0).astype(int)
    return X, y


def _test_matrix(d=12, n=150, density=0.3):
    """A CSR with absent entries, stored zeros and (second value) a copy with stored NaN."""
    T = RNG.normal(size=(n, d))
    T[RNG.random(T.shape) > density] = 0.0
    T[0] = 0.0  # an empty row
    S = sparse.csr_matrix(T)
    S.data[::5] = 0.0  # explicitly stored zeros
    N = S.copy()
    N.data[1::7] = np.nan  # stored NaN
    return S, N


def assert_same(model, compiled, X):
    for meth in compiled.methods:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = getattr(model, meth)(X)
        got = getattr(compiled, meth)(X)
        if sparse.issparse(want):
            want, got = want.toarray(), got.toarray()
        got, want = np.asarray(got), np.asarray(want)
        assert got.shape == want.shape, meth
        if want.dtype.kind in "fc":
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=meth)
        else:
            np.testing.assert_array_equal(got, want, err_msg=meth)


# ------------------------------------------------------------------ models, fitted once --
@pytest.fixture(scope="module")
def models():
    import lightgbm as lgb
    import xgboost as xgb
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.naive_bayes import MultinomialNB
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MaxAbsScaler
    from sklearn.tree import DecisionTreeClassifier

    X, y = _data()
    Xn, yn = _data(nan=0.1)  # boosting trained with NaN: missing has its own direction
    out = {
        "logreg": LogisticRegression(max_iter=500).fit(X, y),
        "ridge": Ridge().fit(X, X[:, 0] * 2 + 1),
        "nb": MultinomialNB().fit(np.abs(X), y),
        "maxabs_logreg": make_pipeline(MaxAbsScaler(), LogisticRegression()).fit(X, y),
        "tree": DecisionTreeClassifier(max_depth=6, random_state=0).fit(X, y),
        "forest": RandomForestClassifier(n_estimators=8, max_depth=5,
                                         random_state=0).fit(X, y),
        "xgb": xgb.XGBClassifier(n_estimators=12, max_depth=4).fit(Xn, yn),
        "xgb_reg": xgb.XGBRegressor(n_estimators=12, max_depth=4).fit(Xn, yn * 2.0 - 0.5),
        "lgb": lgb.LGBMClassifier(n_estimators=12, verbose=-1).fit(Xn, yn),
        "lgb_zam": lgb.LGBMClassifier(n_estimators=12, verbose=-1,
                                      zero_as_missing=True).fit(Xn, yn),
    }
    return out


NAN_OK = ("xgb", "xgb_reg", "lgb", "lgb_zam", "catboost")  # sources that accept NaN


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["logreg", "ridge", "maxabs_logreg", "tree", "forest", "xgb",
                                  "xgb_reg", "lgb", "lgb_zam"])
def test_sparse_matches_source(models, name, backend):
    model = models[name]
    compiled = compile_or_skip(model, backend)
    S, N = _test_matrix()
    assert_same(model, compiled, S)
    if name in NAN_OK:
        assert_same(model, compiled, N)


def test_naive_bayes_sparse(models):
    S, _ = _test_matrix()
    S = abs(S)
    for backend in ("reference", "native"):
        assert_same(models["nb"], compile_or_skip(models["nb"], backend), S)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.__name__)
def test_every_format(models, fmt):
    S, N = _test_matrix()
    for name in ("logreg", "xgb"):
        model = models[name]
        X = fmt(N if name == "xgb" else S)
        assert_same(model, compile_or_skip(model, "native"), X)


def test_absent_entry_rules(models):
    """The rules themselves, measured on the libraries: XGBoost reads absent as missing (its
    CSR answer equals the dense one with NaN there, not with 0); LightGBM (either
    zero_as_missing) reads absent as 0; stored zeros are present zeros."""
    S, _ = _test_matrix()
    dense0 = S.toarray()
    densenan = dense0.copy()
    absent = np.ones(S.shape, dtype=bool)
    absent[S.nonzero()] = False
    coo = S.tocoo()
    absent[coo.row, coo.col] = False  # stored zeros are present
    densenan[absent] = np.nan
    xgbm = models["xgb"]
    assert np.array_equal(xgbm.predict_proba(S), xgbm.predict_proba(densenan))
    assert not np.array_equal(xgbm.predict_proba(S), xgbm.predict_proba(dense0))
    for name in ("lgb", "lgb_zam"):
        assert np.array_equal(models[name].predict_proba(S), models[name].predict_proba(dense0))
    assert peregrine.compile(xgbm).spec.sparse_absent == "nan"
    assert peregrine.compile(models["lgb"]).spec.sparse_absent == "zero"
    assert peregrine.compile(models["logreg"]).spec.sparse_absent == "zero"


def test_catboost_reads_absent_as_zero():
    catboost = pytest.importorskip("catboost")
    X, y = _data(nan=0.1)
    model = catboost.CatBoostClassifier(iterations=15, depth=4, verbose=0,
                                        random_seed=0).fit(X, y)
    S, N = _test_matrix()
    assert np.array_equal(model.predict_proba(S), model.predict_proba(S.toarray()))
    for backend in ("reference", "native"):
        compiled = compile_or_skip(model, backend)
        assert compiled.spec.sparse_absent == "zero"
        assert_same(model, compiled, S)
        assert_same(model, compiled, N)


def test_blocks_bound_memory(models, monkeypatch):
    """Many small blocks give the same answers (and errors name the block's rows)."""
    monkeypatch.setattr(rsparse, "BLOCK_BYTES", 8 * 12 * 7)  # 7 rows a block
    monkeypatch.setattr(rsparse, "MIN_ROWS", 1)
    S, N = _test_matrix()
    for name in ("xgb", "forest", "logreg"):
        model = models[name]
        assert_same(model, compile_or_skip(model, "native"), N if name == "xgb" else S)
    assert rsparse.block_rows(12) == 7
    monkeypatch.undo()
    assert rsparse.block_rows(1000) == 524  # 4 MiB
    assert rsparse.block_rows(50_000) == 128  # MIN_ROWS, 51 MB
    assert rsparse.block_rows(100_000) == 83  # 64 MiB bound


def test_int_and_float32_sparse(models):
    S, _ = _test_matrix()
    ints = sparse.csr_matrix(np.round(S.toarray() * 3).astype(np.int64))
    f32 = S.astype(np.float32)
    for name in ("xgb", "forest", "lgb"):
        model, compiled = models[name], compile_or_skip(models[name], "native")
        if name != "lgb":  # LightGBM's CSR predict refuses int64 data (TypeError)
            assert_same(model, compiled, ints)
        assert_same(model, compiled, f32)


def test_errors(models):
    compiled = peregrine.compile(models["logreg"], backend="native")
    S, N = _test_matrix()
    with pytest.raises(InputError, match="input has 11 features, but the model expects 12"):
        compiled.predict(S[:, :11])
    with pytest.raises(InputError, match="input has 11 features, but the model expects 12"):
        compiled.predict(S[:, :11].toarray())
    # logistic regression rejects NaN: the stored NaN's row and column are named
    k = 1
    row = int(np.searchsorted(N.indptr, k, side="right")) - 1
    with pytest.raises(InputError, match=f"NaN or infinity at row {row}, column "
                                         f"{N.indices[k]}"):
        compiled.predict(N)
    with pytest.raises(InputError, match="0 rows"):
        compiled.predict(S[:0])
    with pytest.raises(InputError, match="LIL format"):
        compiled.predict(S.tolil())
    with pytest.raises(InputError, match="dtype complex"):
        compiled.predict(S.astype(np.complex128))


def test_duplicates_are_summed(models):
    """A non-canonical COO (duplicate coordinates) reads as scipy's toarray: summed."""
    rows = np.array([0, 0, 1, 1, 2])
    cols = np.array([3, 3, 0, 5, 7])
    vals = np.array([0.5, 0.25, -1.0, 2.0, 1.5])
    X = sparse.coo_matrix((vals, (rows, cols)), shape=(3, 12))
    model = models["logreg"]
    got = peregrine.compile(model, backend="native").predict_proba(X)
    np.testing.assert_allclose(got, model.predict_proba(X.toarray()), rtol=1e-5, atol=1e-6)


def test_artifact_keeps_rule(models, tmp_path):
    compiled = peregrine.compile(models["xgb"], backend="native")
    path = tmp_path / "m.peregrine"
    compiled.save(path)
    loaded = peregrine.load(path)
    assert loaded.spec.sparse_absent == "nan"
    _, N = _test_matrix()
    assert_same(models["xgb"], loaded, N)


def test_artifact_without_rule_loads(models):
    """Artifacts written before ModelSpec.sparse_absent: XGBoost's read absent entries as
    missing; another holding a forest that compares with ``<`` (an XGBoost step) refuses
    sparse input; the rest read 0."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MaxAbsScaler

    from peregrine.runtime.artifact import _old_sparse_rule

    def rule(model):
        spec = peregrine.compile(model, backend="reference").spec
        return _old_sparse_rule({"source": spec.source}, spec.graph)

    assert rule(models["xgb"]) == "nan"
    assert rule(models["forest"]) == "zero"
    assert rule(models["lgb"]) == "zero"
    X, y = _data(nan=0.1)
    pipe = make_pipeline(MaxAbsScaler(), clone(models["xgb"])).fit(X, y)
    assert rule(pipe) == "refuse"


def test_pipeline_rules(models):
    """A pipeline takes XGBoost's rule only where XGBoost alone reads the raw input; behind a
    transformer (which may or may not keep the matrix sparse: sklearn hands XGBoost whatever
    it returns) sparse input is refused with an InputError."""
    from sklearn.pipeline import Pipeline, make_pipeline
    from sklearn.preprocessing import MaxAbsScaler

    X, y = _data(nan=0.1)
    S, N = _test_matrix()
    alone = Pipeline([("xgb", clone(models["xgb"]))]).fit(X, y)
    compiled = peregrine.compile(alone, backend="native")
    assert compiled.spec.sparse_absent == "nan"
    assert_same(alone, compiled, N)
    behind = make_pipeline(MaxAbsScaler(), clone(models["xgb"])).fit(X, y)
    compiled = peregrine.compile(behind, backend="native")
    assert compiled.spec.sparse_absent == "refuse"
    with pytest.raises(InputError, match="sparse input is not supported"):
        compiled.predict(S)
    np.testing.assert_allclose(compiled.predict_proba(S.toarray()),
                               behind.predict_proba(S.toarray()), rtol=1e-5, atol=1e-6)


def test_prepare_input_densifies(models):
    from peregrine.runtime.inputs import prepare_input

    spec = peregrine.compile(models["xgb"]).spec
    S, _ = _test_matrix()
    arr = prepare_input(S, spec)
    assert np.isnan(arr[0]).all()  # the empty row: every entry missing
    stored = S.tocoo()
    np.testing.assert_array_equal(arr[stored.row, stored.col], stored.data)


def test_spec_rejects_unknown_rule(models):
    import dataclasses

    spec = peregrine.compile(models["logreg"]).spec
    with pytest.raises(ValueError, match="sparse_absent"):
        dataclasses.replace(spec, sparse_absent="one")



# ------------------------------------------------------------- the sparse linear path --
@pytest.mark.parametrize("backend", BACKENDS)
def test_linear_path_is_sklearns_sum(backend):
    """LogisticRegression / Ridge / MultinomialNB on a sparse matrix: the product is scipy's
    CSR x dense, the call scikit-learn makes, so decision_function is sklearn's bits (the bias
    is added after it, as sklearn adds intercept_); the other methods within the tolerance."""
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.naive_bayes import MultinomialNB

    X = sparse.random(400, 300, density=0.02, format="csr", random_state=3)
    y = RNG.integers(0, 3, 400)
    for model in (LogisticRegression(max_iter=300).fit(X, y), Ridge().fit(X, y * 1.5),
                  MultinomialNB().fit(X, y)):
        compiled = compile_or_skip(model, backend)
        T = sparse.random(120, 300, density=0.02, format="csr", random_state=4)
        assert_same(model, compiled, T)
        assert compiled.__dict__["_sparse_plan"] is not None  # the path was taken
        if backend in ("reference", "native") and hasattr(model, "decision_function"):
            np.testing.assert_array_equal(compiled.decision_function(T),
                                          model.decision_function(T))


def test_linear_path_and_dense_blocks_agree(monkeypatch):
    from sklearn.linear_model import LogisticRegression

    from peregrine.runtime import sparse_linear

    X = sparse.random(300, 200, density=0.05, format="csr", random_state=5)
    model = LogisticRegression(max_iter=300).fit(X, RNG.integers(0, 4, 300))
    compiled = peregrine.compile(model, backend="native")
    T = sparse.random(100, 200, density=0.05, format="csc", random_state=6)
    sparse_path = compiled.predict_proba(T)
    monkeypatch.setattr(sparse_linear, "DENSITY_K", 0.0)  # always the dense blocks
    np.testing.assert_allclose(compiled.predict_proba(T), sparse_path, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(compiled.predict(T), model.predict(T))


def test_linear_path_not_taken_elsewhere(models):
    """Trees and XGBoost (absent = missing): no plan; they take the dense blocks."""
    from peregrine.runtime.sparse_linear import linear_plan

    for name in ("forest", "xgb"):
        assert linear_plan(peregrine.compile(models[name], backend="reference")) is None, name


def test_block_dtype(models):
    """Blocks are float32 where every reader of the input is a forest whose library casts to
    float32 (sklearn trees, XGBoost); LightGBM compares doubles, linear models read float64."""
    S, _ = _test_matrix()
    for name, want in (("forest", np.float32), ("tree", np.float32), ("xgb", np.float32),
                       ("lgb", np.float64), ("logreg", np.float64),
                       ("maxabs_logreg", np.float64)):
        compiled = peregrine.compile(models[name], backend="reference")
        assert rsparse.block_dtype(compiled, rsparse.as_csr(S, compiled.spec)) == want, name


def test_sparse_refused_where_the_source_refuses_it():
    """HistGradientBoosting and a centring StandardScaler reading the raw input refuse a sparse
    matrix in scikit-learn; the compiled model raises a typed error instead of answering for
    the densified matrix. A StandardScaler that does not centre accepts it in both."""
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(4)
    X = rng.normal(size=(300, 4))
    y = (X[:, 0] > 0).astype(int)
    S = sparse.csr_matrix(X * (X > 0.5))
    refused = [
        HistGradientBoostingClassifier(max_iter=3).fit(X, y),
        make_pipeline(StandardScaler(), LogisticRegression()).fit(X, y),
        make_pipeline(ColumnTransformer([("s", StandardScaler(), [0, 2])]),
                      LogisticRegression()).fit(X, y),
    ]
    for model in refused:
        with pytest.raises((TypeError, ValueError)):
            model.predict(S)
        with pytest.raises(InputError):
            peregrine.compile(model, "native").predict(S)
    kept = make_pipeline(StandardScaler(with_mean=False), LogisticRegression()).fit(X, y)
    np.testing.assert_allclose(peregrine.compile(kept, "native").predict_proba(S),
                               kept.predict_proba(S), rtol=1e-5, atol=1e-6)
