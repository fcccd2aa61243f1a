"""A linear model reading one-hot indicators, fused without them (kernels/rowwise_onehot.py):
each category picks its weight row, added in the indicators' column order from 0.0, then the
intercept; which is scikit-learn's own order on the ColumnTransformer's sparse output, so
``decision_function`` is equal to the bit there, and within the conformance tolerance where
scikit-learn multiplies a dense matrix (BLAS). Unknown, NaN, dropped and infrequent
categories, more than 64 categories (one comparison per 64), float32 input, and the
fallback where the indicator columns are not in the input columns' order."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import sparse
from sklearn.compose import ColumnTransformer
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

import peregrine
from peregrine.ir import Op
from peregrine.kernels import rowwise_onehot
from tests.compile_helpers import compile_or_skip

RNG = np.random.default_rng(11)
pytestmark = pytest.mark.filterwarnings("ignore:Found unknown categories")


def _frame(n: int, rng: np.random.Generator, unseen: bool = False) -> pd.DataFrame:
    """Three string columns (3, 64 and 150 categories; ``unseen``: values never fitted), a
    numeric category column with NaN (a fitted category), two numbers."""
    def pick(k: int, prefix: str) -> np.ndarray:
        top = k + (5 if unseen else 0)
        return np.array([f"{prefix}{i}" for i in rng.integers(0, top, n)], dtype=object)

    codes = rng.integers(0, 6 + (2 if unseen else 0), n).astype(float)
    codes[rng.random(n) < 0.1] = np.nan
    return pd.DataFrame({"a": pick(3, "a"), "b": pick(64, "b"), "c": pick(150, "c"),
                         "code": codes, "x": rng.normal(size=n), "y": rng.normal(size=n) * 5})


def _fit(encoder: OneHotEncoder, head, classes: int = 2, sparse_threshold: float = 0.3):
    train = _frame(3000, np.random.default_rng(0))
    y = (np.arange(len(train)) * 7919) % classes
    ct = ColumnTransformer([("oh", encoder, ["a", "b", "c", "code"]),
                            ("num", StandardScaler(), ["x", "y"])],
                           sparse_threshold=sparse_threshold)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make_pipeline(ct, head).fit(train, y)


def _one_hot_linear_fused(compiled) -> bool:
    kernels = compiled._exec.row_kernels()
    return bool(kernels) and all(
        '"one_hot_linear"' in region.kernel._plan("float64").spec.steps
        for region in kernels.values())


CASES = {
    "binary": lambda: _fit(OneHotEncoder(handle_unknown="ignore"), LogisticRegression()),
    "multiclass": lambda: _fit(OneHotEncoder(handle_unknown="ignore"),
                               LogisticRegression(max_iter=300), classes=4),
    "drop-first": lambda: _fit(OneHotEncoder(drop="first", handle_unknown="ignore"),
                               LogisticRegression()),
    "infrequent": lambda: _fit(OneHotEncoder(min_frequency=30,
                                             handle_unknown="infrequent_if_exist"),
                               LogisticRegression()),
    "ridge": lambda: _fit(OneHotEncoder(handle_unknown="ignore"), Ridge()),
}


def _compile(model, backend: str):
    """``torch-ops``: the torch backend's op-by-op program (fused_kernels=False), which
    TorchScript and CUDA run too."""
    if backend == "torch-ops":
        return peregrine.compile(model, backend="torch",
                                 options=peregrine.CompileOptions(fused_kernels=False))
    return compile_or_skip(model, backend)


def _torch_picks_rows(compiled) -> bool:
    """The torch program holds ops_onehot.OneHotLinear (plain or TorchScript'ed) and no ONE_HOT
    module (the indicators are not made)."""
    prog = compiled._exec._program(tuple(compiled.spec.graph.outputs)[:1])
    names = {getattr(m, "original_name", type(m).__name__) for m in prog.modules()}
    return "OneHotLinear" in names and "OneHot" not in names


def _tvm_picks_rows(compiled) -> bool:
    """The TVM program took the one-hot product (backends/tvm/onehot.py), not ONE_HOT's
    NumPy fallback."""
    from peregrine.backends.tvm import onehot

    graph = compiled.spec.graph
    order = graph.steps(list(graph.outputs.values()))
    linears, absorbed = onehot.plan(graph, order, set(), {})
    return bool(linears) and all(n.name in absorbed for n in order if n.op is Op.ONE_HOT)


# TVM builds take seconds: two cases there (all of them on every other backend)
PAIRS = [(case, backend) for case in sorted(CASES)
         for backend in ("native", "torch", "torch-ops", "torchscript", "tvm")
         if backend != "tvm" or case in ("multiclass", "infrequent")]


@pytest.mark.parametrize("case, backend", PAIRS)
def test_one_hot_linear_equals_sklearn_sparse_product(case, backend):
    model = CASES[case]()
    assert sparse.issparse(model[0].transform(_frame(5, RNG)))  # scikit-learn's csr_matvec
    fast = _compile(model, backend)
    if backend == "native":
        assert _one_hot_linear_fused(fast)
    if backend in ("torch-ops", "torchscript"):
        assert _torch_picks_rows(fast)
    if backend == "tvm":
        assert _tvm_picks_rows(fast)
    for n, unseen in ((1, False), (7, True), (5003, True)):
        X = _frame(n, np.random.default_rng(n), unseen)
        if hasattr(model, "decision_function"):
            np.testing.assert_array_equal(fast.decision_function(X), model.decision_function(X))
            np.testing.assert_array_equal(fast.predict(X), model.predict(X))
            np.testing.assert_allclose(fast.predict_proba(X), model.predict_proba(X),
                                       rtol=1e-12, atol=1e-15)
        else:
            np.testing.assert_array_equal(fast.predict(X), model.predict(X))


def test_dense_output_within_tolerance_and_one_hot_alone():
    """A dense ColumnTransformer (scikit-learn's BLAS product: another order) and a
    OneHotEncoder -> LogisticRegression pipeline (LINEAR reading ONE_HOT itself)."""
    dense = _fit(OneHotEncoder(handle_unknown="ignore"), LogisticRegression(),
                 sparse_threshold=0.0)
    train = _frame(2000, np.random.default_rng(1))
    alone = make_pipeline(OneHotEncoder(handle_unknown="ignore"), LogisticRegression()).fit(
        train[["a", "b", "c"]], np.arange(len(train)) % 2)
    X = _frame(3001, np.random.default_rng(2), unseen=True)
    for model, data in ((dense, X), (alone, X[["a", "b", "c"]])):
        fast = peregrine.compile(model, backend="native")
        assert _one_hot_linear_fused(fast)
        np.testing.assert_allclose(fast.decision_function(data), model.decision_function(data),
                                   rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(fast.predict(data), model.predict(data))
    np.testing.assert_array_equal(
        peregrine.compile(alone, backend="native").decision_function(X[["a", "b", "c"]]),
        alone.decision_function(X[["a", "b", "c"]]))  # sparse there too: the same bits


def test_numeric_categories_float32_and_nan():
    """Numeric one-hot columns given as a float32 array (the kernel widens them as the rule
    does), NaN a fitted category of one column and unseen in another."""
    rng = np.random.default_rng(4)
    train = rng.integers(0, 70, size=(3000, 3)).astype(np.float64)
    train[rng.random(train.shape) < 0.05] = np.nan
    train[:, 2] = np.nan_to_num(train[:, 2], nan=1.0)  # no NaN fitted in column 2
    model = make_pipeline(OneHotEncoder(handle_unknown="ignore"),
                          LogisticRegression(max_iter=300)).fit(train, np.arange(3000) % 3)
    X = rng.integers(0, 80, size=(4000, 3)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    for backend in ("native", "torch-ops", "torchscript", "tvm"):
        fast = _compile(model, backend)
        picks = {"native": _one_hot_linear_fused, "tvm": _tvm_picks_rows}
        assert picks.get(backend, _torch_picks_rows)(fast)
        for data in (X, X.astype(np.float64), X[:1]):
            np.testing.assert_array_equal(fast.decision_function(data),
                                          model.decision_function(data))
            np.testing.assert_array_equal(fast.predict(data), model.predict(data))


def test_slots_out_of_column_order_are_not_absorbed():
    """Summing picked rows column by column is W's row order only when each column's slots
    follow the previous column's; another layout keeps the indicators."""
    from types import SimpleNamespace

    ordered = SimpleNamespace(slots=[np.array([0, 1]), np.array([-1, 2, 3])],
                              unknown_slots=np.array([-1, 4]))
    crossed = SimpleNamespace(slots=[np.array([0, 3]), np.array([1, 2])],
                              unknown_slots=np.array([-1, -1]))
    unknown_last = SimpleNamespace(slots=[np.array([1, 2]), np.array([4])],
                                   unknown_slots=np.array([5, -1]))  # after column 1's
    assert rowwise_onehot._in_column_order(ordered)
    assert not rowwise_onehot._in_column_order(crossed)
    assert not rowwise_onehot._in_column_order(unknown_last)


def test_guard_reader_does_not_block_and_wanted_indicators_stay():
    """The guard output reading the concatenation (the final estimator's check_array) does not
    count as a reader; a transform returning the indicators computes them."""
    model = CASES["binary"]()
    graph = peregrine.compile(model, backend="native").spec.graph
    assert any(name.startswith("guard:") for name in graph.outputs)
    ct = peregrine.compile(model[0].set_output(transform="default"), backend="native")
    X = _frame(50, RNG, unseen=True)
    got = ct.transform(X)
    want = model[0].transform(X)
    np.testing.assert_array_equal(got.toarray() if sparse.issparse(got) else got,
                                  want.toarray())
    assert any(n.op is Op.ONE_HOT for n in ct.spec.graph.nodes)
