"""Row-wise regions on the native backend: ONE_HOT as a fused row-kernel step
(kernels/rowwise.py) and the ops in front of a forest run as one fused kernel that stores the
forest's input in the dtype the forest compares in (backends/native/fusion.py RowRegion).
Every answer is bit-identical to the op-by-op rules (``fused_kernels=False``) and agrees with
the source library, on float32 and float64, with NaN, -0.0 and unseen categories, across row
blocks and threads."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("llvmlite")
pytest.importorskip("sklearn")
pd = pytest.importorskip("pandas")

from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestClassifier  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import OneHotEncoder, StandardScaler  # noqa: E402

import peregrine  # noqa: E402
from peregrine import CompileOptions  # noqa: E402
from peregrine.backends.native.fusion import RowRegion  # noqa: E402

RNG = np.random.default_rng(11)

ENCODERS = {
    "ignore": dict(handle_unknown="ignore"),
    "infrequent-min-frequency": dict(handle_unknown="infrequent_if_exist", min_frequency=40),
    "infrequent-max-categories": dict(handle_unknown="infrequent_if_exist", max_categories=3),
    "drop-first": dict(drop="first"),
    "drop-if-binary": dict(drop="if_binary"),
    "error": dict(handle_unknown="error"),
}


def _codes(n: int) -> np.ndarray:
    X = RNG.integers(0, 7, size=(n, 4)).astype(np.float64)
    X[RNG.random(X.shape) < 0.06] = np.nan  # a NaN category
    X[:, 1] -= 3.0  # negative categories and 0.0
    X[:, 3] = X[:, 3] > 3  # a binary column (drop="if_binary")
    return X


def _unseen(X: np.ndarray, kw: dict) -> np.ndarray:
    X = X.copy()
    X[::13, 1] = -0.0  # equal to the category 0.0
    if kw.get("handle_unknown") in ("ignore", "infrequent_if_exist"):
        X[::7, 2] = 99.0
        X[::11, 0] = 1e30
    return X


def _fused(compiled, output: str) -> bool:
    return (compiled.spec.methods[output].output,) in compiled._exec.row_kernels()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(ENCODERS))
def test_one_hot_step_is_the_encoders_transform(name, dtype):
    kw = ENCODERS[name]
    enc = OneHotEncoder(sparse_output=False, **kw).fit(_codes(2000))
    X = _unseen(_codes(3001), kw).astype(dtype)
    compiled = peregrine.compile(enc, "native")
    assert _fused(compiled, "transform")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = enc.transform(X)
    got = compiled.transform(X)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", ["ignore", "infrequent-max-categories", "drop-first"])
def test_one_hot_then_linear_model_fuses_whole(name):
    kw = ENCODERS[name]
    X = _codes(2000)
    y = (np.nan_to_num(X[:, 0]) + RNG.normal(size=len(X)) > 3).astype(int)
    model = make_pipeline(OneHotEncoder(**kw), LogisticRegression(max_iter=300)).fit(X, y)
    Xt = _unseen(_codes(997), kw)
    compiled = peregrine.compile(model, "native")
    assert _fused(compiled, "predict_proba")
    np.testing.assert_allclose(compiled.predict_proba(Xt), model.predict_proba(Xt),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(compiled.predict(Xt), model.predict(Xt))


def _frame(n: int) -> pd.DataFrame:
    data = {f"s{j}": RNG.choice([f"c{k}" for k in range(12)] + [None], n) for j in range(5)}
    data.update({f"x{j}": RNG.normal(size=n) * (j + 1) for j in range(4)})
    df = pd.DataFrame(data)
    df.loc[::17, "x1"] = np.nan
    return df


def _column_model(head):
    pre = ColumnTransformer([
        ("cat", OneHotEncoder(handle_unknown="ignore"), [f"s{j}" for j in range(5)]),
        ("num", StandardScaler(), [f"x{j}" for j in range(4)])], sparse_threshold=0)
    df = _frame(3000)
    y = (df["x0"] + (df["s0"] == "c3") * 2 > 0.5).astype(int)
    if isinstance(head, HistGradientBoostingRegressor):
        y = df["x0"].fillna(0) * 2 + (df["s1"] == "c2")
    return make_pipeline(pre, head).fit(df, y)


def _heads():
    heads = {
        "random-forest": lambda: RandomForestClassifier(n_estimators=20, max_depth=6,
                                                        random_state=0),
        "hist-gbdt": lambda: HistGradientBoostingRegressor(max_iter=30, random_state=0),
    }
    try:
        from xgboost import XGBClassifier

        heads["xgboost"] = lambda: XGBClassifier(n_estimators=30, max_depth=4,
                                                 colsample_bytree=0.5, random_state=0)
    except ImportError:
        pass
    try:
        from lightgbm import LGBMClassifier

        heads["lightgbm"] = lambda: LGBMClassifier(n_estimators=30, num_leaves=15,
                                                   verbose=-1, random_state=0)
    except ImportError:
        pass
    return heads


HEADS = _heads()


@pytest.mark.parametrize("head", sorted(HEADS))
def test_forest_input_is_one_row_region(head):
    model = _column_model(HEADS[head]())
    method = "predict_proba" if hasattr(model, "predict_proba") else "predict"
    compiled = peregrine.compile(model, "native")
    plan = compiled._exec.plan((compiled.spec.methods[method].output,))
    regions = [s for s in plan.steps if isinstance(s, RowRegion)]
    assert len(regions) == 1
    # the forest compares in float32 (scikit-learn's forests, XGBoost) or float64
    # (HistGradientBoosting, LightGBM): the region stores that dtype
    assert regions[0].dtype == (np.float32 if head in ("random-forest", "xgboost")
                                else np.float64)
    rules = peregrine.compile(model, "native", options=CompileOptions(fused_kernels=False))
    # 9,000 rows: several row blocks (REGION_BLOCK_BYTES), each split over two threads
    df = _frame(9000)
    df.loc[::29, "s2"] = "never-seen"
    df.loc[::31, "x2"] = 1e30
    got = getattr(compiled, method)(df)
    np.testing.assert_array_equal(got, getattr(rules, method)(df))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = getattr(model, method)(df)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    if method == "predict_proba":
        np.testing.assert_array_equal(compiled.predict(df), model.predict(df))
    one = df.iloc[[5]]
    np.testing.assert_array_equal(getattr(compiled, method)(one), getattr(rules, method)(one))


def test_region_not_formed_when_its_nodes_are_read_elsewhere():
    # a VotingClassifier's two forests read the same scaled input: one region computes it
    # once, and the second forest reads the region's output
    from sklearn.ensemble import VotingClassifier

    X = RNG.normal(size=(800, 5))
    y = (X[:, 0] > 0).astype(int)
    vote = VotingClassifier([("a", RandomForestClassifier(n_estimators=5, random_state=0)),
                             ("b", RandomForestClassifier(n_estimators=7, random_state=1))],
                            voting="soft")
    model = make_pipeline(StandardScaler(), vote).fit(X, y)
    compiled = peregrine.compile(model, "native")
    rules = peregrine.compile(model, "native", options=CompileOptions(fused_kernels=False))
    Xt = RNG.normal(size=(5000, 5))
    Xt[::9, 1] = np.nan
    np.testing.assert_array_equal(compiled.predict_proba(Xt), rules.predict_proba(Xt))
    np.testing.assert_allclose(compiled.predict_proba(Xt), model.predict_proba(Xt),
                               rtol=1e-5, atol=1e-6)


# ---- a few rows of a fused row kernel through the machine-code builtin (fused._row_entry)
def _row_models():
    from sklearn.naive_bayes import BernoulliNB
    from sklearn.neural_network import MLPClassifier

    X = RNG.normal(size=(600, 7))
    y2, y3 = (X[:, 0] > 0).astype(int), np.digitize(X[:, 1], [-0.5, 0.5])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "logreg": LogisticRegression(max_iter=300).fit(X, y2),
            "scaler-logreg-3": make_pipeline(StandardScaler(), LogisticRegression(
                max_iter=300)).fit(X, y3),
            "bernoulli-nb": BernoulliNB(binarize=0.2).fit(X, y3),
            "mlp": MLPClassifier(hidden_layer_sizes=(8,), max_iter=200,
                                 random_state=0).fit(X, y3),
        }


ROW_MODELS = _row_models()


@pytest.mark.parametrize("name", sorted(ROW_MODELS))
def test_row_kernel_builtin_answers_as_the_python_path(name):
    model = ROW_MODELS[name]
    compiled = peregrine.compile(model, "native")
    method = compiled.predict_proba
    # each of these is one fused row kernel with a float64 output: the method is the builtin
    assert type(method).__name__ == "builtin_function_or_method"
    X = RNG.normal(size=(70, 7))
    for rows in (1, 2, 64, 65):
        for dtype in (np.float64, np.float32):
            part = X[:rows].astype(dtype)
            got = method(part)
            assert got.dtype == np.float64 and got.shape == (rows, len(model.classes_))
            np.testing.assert_array_equal(got, compiled._call("predict_proba", part))
            np.testing.assert_allclose(got, model.predict_proba(part), rtol=1e-5, atol=1e-6)
    # strided and Fortran-ordered rows, a row at a time
    wide = np.asfortranarray(np.repeat(X, 2, axis=1)[:, ::2])
    for r in range(5):
        np.testing.assert_array_equal(method(wide[r:r + 1]),
                                      compiled._call("predict_proba", X[r:r + 1]))
    np.testing.assert_array_equal(compiled.predict(X[:3]), model.predict(X[:3]))


def test_row_kernel_builtin_leaves_bad_rows_to_the_python_path():
    from peregrine.errors import InputError

    compiled = peregrine.compile(ROW_MODELS["logreg"], "native")
    X = RNG.normal(size=(3, 7))
    X[1, 4] = np.nan
    with pytest.raises(InputError, match="row 1, column 4"):
        compiled.predict_proba(X)
    with pytest.raises(InputError):
        compiled.predict_proba(RNG.normal(size=(1, 6)))  # wrong width
    with pytest.raises(InputError):
        compiled.predict_proba(np.zeros((0, 7)))
    # a list, a keyword: the Python method's own handling
    np.testing.assert_array_equal(compiled.predict_proba([list(X[0])]),
                                  compiled.predict_proba(X[:1]))
    np.testing.assert_array_equal(compiled.predict_proba(X=X[:1]), compiled.predict_proba(X[:1]))


def test_row_kernel_builtin_from_threads():
    from concurrent.futures import ThreadPoolExecutor

    compiled = peregrine.compile(ROW_MODELS["scaler-logreg-3"], "native")
    X = RNG.normal(size=(400, 7))
    want = compiled._call("predict_proba", X)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda r: compiled.predict_proba(X[r:r + 1]), range(400)))
    np.testing.assert_array_equal(np.vstack(got), want)
