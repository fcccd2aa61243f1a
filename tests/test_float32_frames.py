"""DataFrames with float32 number columns beside string columns: scikit-learn's
ColumnTransformer hands each block to its transformer as check_array makes it (a block of
float32 columns stays float32: StandardScaler/MinMaxScaler compute in float32), so the compiled
model must compute those blocks in float32 too. Compared with scikit-learn's own answers:
scores rtol 1e-5 / atol 1e-6, labels identical, tree decisions identical (leaf ids)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler, OneHotEncoder, StandardScaler
from sklearn.tree import DecisionTreeRegressor

import peregrine

BACKENDS = ["reference", "torch", "native"]


def _frame(n: int, seed: int, mixed: str | None = None) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        # values whose float32 and float64 scalings round apart (many significant digits)
        "a": (rng.normal(size=n) * 1234.5678 + 0.1).astype(np.float32),
        "b": (rng.normal(size=n) * 1e-3 + 7.0).astype(np.float32),
        "c": rng.choice(["x", "y", "z"], size=n),
        "d": (rng.normal(size=n) * 3.3).astype(np.float32),
    })
    if mixed == "float64":
        df["e"] = rng.normal(size=n) * 2.2
    elif mixed == "int":
        df["e"] = rng.integers(0, 1000, size=n)
    return df


def _ct(scaler, mixed):
    num = ["a", "b", "d"]
    parts = [("cat", OneHotEncoder(), ["c"]), ("num", scaler, num)]
    if mixed:
        parts.append(("other", StandardScaler(), ["e"]))
    return ColumnTransformer(parts)


def _target(df):
    return (df["a"].to_numpy(np.float64) * (df["b"].to_numpy(np.float64) - 7) > 0).astype(int)


# a frame mixing float32 with other number columns is read as float64; scikit-learn still
# computes a block made only of its float32 columns in float32 (runtime/frame_blocks.py)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scaler", [StandardScaler, MinMaxScaler])
@pytest.mark.parametrize("mixed", [None, "float64", "int"])
def test_float32_blocks_beside_strings(backend, scaler, mixed):
    df, test = _frame(2000, 0, mixed), _frame(3000, 1, mixed)
    y = _target(df)
    models = [
        make_pipeline(_ct(scaler(), mixed), LogisticRegression(max_iter=300)),
        make_pipeline(_ct(scaler(), mixed), RandomForestClassifier(
            10, max_depth=12, random_state=0)),
        make_pipeline(_ct(scaler(), mixed), DecisionTreeRegressor(random_state=0)),
    ]
    for p in models:
        p.fit(df, y if not isinstance(p[-1], DecisionTreeRegressor) else df["a"].to_numpy())
        c = peregrine.compile(p, backend=backend)
        # what the transform computes: float32 blocks in float32 (transform alone)
        ct_c = peregrine.compile(p[0], backend=backend)
        want_t = p[0].transform(test)
        got_t = ct_c.transform(test)
        assert got_t.dtype == want_t.dtype
        np.testing.assert_array_equal(got_t, want_t)
        np.testing.assert_array_equal(c.predict(test), p.predict(test))
        if hasattr(p, "predict_proba"):
            np.testing.assert_allclose(c.predict_proba(test), p.predict_proba(test),
                                       rtol=1e-5, atol=1e-6)
        for k in (1, 7):  # the one-row and few-rows paths
            np.testing.assert_array_equal(c.predict(test.iloc[:k]), p.predict(test.iloc[:k]))


def _mixed(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "a": (rng.normal(size=n) * 1234.5678 + 0.1).astype(np.float32),
        "b": (rng.normal(size=n) * 1e-3 + 7.0).astype(np.float32),
        "e": rng.normal(size=n) * 2.2,
        "i8": rng.integers(-100, 100, size=n).astype(np.int8),
        "i32": rng.integers(-100, 100, size=n).astype(np.int32),
        "flag": rng.integers(0, 2, size=n).astype(bool),
    })


# (ColumnTransformer blocks, remainder): each block's dtype is np.result_type of its columns'
# (float32 with int8 or bool stays float32, with int32 or float64 it is float64); the output
# is float32 only when every block is
MIXED_BLOCKS = {
    "f32-and-f64-blocks": ([("s32", StandardScaler(), ["a", "b"]),
                            ("s64", StandardScaler(), ["e"])], "drop"),
    "f32-block-only": ([("s32", StandardScaler(), ["a", "b"])], "drop"),
    "f32-block-passthrough": ([("s32", MinMaxScaler(), ["a", "b"]), ("no", "drop", ["flag"])],
                              "passthrough"),
    "f32-with-int8": ([("s", MinMaxScaler(), ["a", "i8"]), ("t", StandardScaler(), ["b"])],
                      "drop"),
    "f32-with-bool": ([("s", StandardScaler(), ["b", "flag"])], "drop"),
    "f32-with-int32": ([("s", StandardScaler(), ["a", "i32"]),
                        ("t", StandardScaler(), ["b"])], "drop"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("blocks", sorted(MIXED_BLOCKS))
def test_mixed_frame_blocks(backend, blocks):
    parts, remainder = MIXED_BLOCKS[blocks]
    df, test = _mixed(500, 0), _mixed(2000, 1)
    ct = ColumnTransformer(parts, remainder=remainder).fit(df)
    c = peregrine.compile(ct, backend=backend)
    for rows in (test, test.iloc[:1], test.iloc[:7]):
        want, got = ct.transform(rows), c.transform(rows)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    y = (test["a"].to_numpy(np.float64) * (test["b"].to_numpy(np.float64) - 7) > 0)
    p = make_pipeline(ColumnTransformer(parts, remainder=remainder),
                      LogisticRegression(max_iter=300)).fit(test, y)
    c = peregrine.compile(p, backend=backend)
    np.testing.assert_array_equal(c.predict(df), p.predict(df))
    np.testing.assert_allclose(c.predict_proba(df), p.predict_proba(df), rtol=1e-5, atol=1e-6)


def test_mixed_frame_blocks_tvm():
    """The TVM backend lowers a float32 block's selection as a Cast: one mixed frame."""
    pytest.importorskip("tvm")
    parts, remainder = MIXED_BLOCKS["f32-and-f64-blocks"]
    df = _mixed(500, 0)
    ct = ColumnTransformer(parts, remainder=remainder).fit(df)
    c = peregrine.compile(ct, backend="tvm")
    for rows in (df, df.iloc[:1]):
        want, got = ct.transform(rows), c.transform(rows)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
