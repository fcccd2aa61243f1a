"""A few DataFrame rows (an online request) take the column-array path of
``runtime/inputs.py`` (``FEW_ROWS``) and dictionary lookups for string categories
(``categories.few_codes``): the matrix the graph reads must be the one the batch path builds,
value for value and dtype for dtype, and errors must say the same."""

from __future__ import annotations

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("sklearn")

from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder, StandardScaler  # noqa: E402

import peregrine  # noqa: E402
from peregrine.errors import InputError  # noqa: E402
from peregrine.runtime import inputs  # noqa: E402
from peregrine.runtime.inputs import prepare_input  # noqa: E402

RNG = np.random.default_rng(5)
CATS = [f"c{k}" for k in range(6)]


def _frame(n: int, string_dtype: str = "object") -> pd.DataFrame:
    df = pd.DataFrame({
        "s0": pd.Series(RNG.choice(CATS + [None], n), dtype=string_dtype),
        "s1": pd.Series(RNG.choice(CATS, n), dtype=string_dtype),
        "x0": RNG.normal(size=n),
        "i0": RNG.integers(-5, 5, n),
        "b0": RNG.random(n) > 0.5,
        "k0": pd.Categorical(RNG.choice(["a", "b", "z"], n), categories=["a", "b", "z"]),
    })
    return df


def _model(handle_unknown: str = "ignore"):
    df = _frame(600)
    y = (df["x0"] + (df["s1"] == "c2") > 0).astype(int)
    pre = ColumnTransformer([
        ("oh", OneHotEncoder(handle_unknown=handle_unknown), ["s0", "s1", "k0"]),
        ("num", StandardScaler(), ["x0", "i0", "b0"])])
    return make_pipeline(pre, LogisticRegression(max_iter=300)).fit(df, y)


def _batch_path(df, spec, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(inputs, "FEW_ROWS", -1)
        return prepare_input(df, spec)


@pytest.mark.parametrize("string_dtype", ["object", "str"])
def test_few_rows_build_the_batch_paths_matrix(string_dtype, monkeypatch):
    model = _model()
    compiled = peregrine.compile(model, "native")
    df = _frame(40, "object")
    df.loc[3, "s0"] = np.nan
    df.loc[4, "s0"] = pd.NA
    df.loc[5, "s1"] = "never-seen"
    df.loc[6, "s0"] = "C1"  # case matters
    df = df.astype({"s0": string_dtype, "s1": string_dtype})
    for rows in ([0], [3, 4, 5], [5, 6], list(range(40))):
        part = df.iloc[rows]
        few = prepare_input(part, compiled.spec)
        batch = _batch_path(part, compiled.spec, monkeypatch)
        assert few.dtype == batch.dtype
        np.testing.assert_array_equal(few, batch)
        if string_dtype == "object" and 3 not in rows:
            # (NaN and pd.NA where the encoder was fitted on None are a documented gap of the
            # boundary, batch and few rows alike: docs/pipelines.md "Known gaps")
            np.testing.assert_allclose(compiled.predict_proba(part),
                                       model.predict_proba(part), rtol=1e-5, atol=1e-6)


def test_reordered_columns_and_float32_blocks(monkeypatch):
    df = pd.DataFrame({"a": RNG.normal(size=300).astype(np.float32),
                       "s": RNG.choice(CATS, 300),
                       "b": RNG.normal(size=300).astype(np.float32)})
    y = (df["a"] > 0).astype(int)
    pre = ColumnTransformer([("oh", OneHotEncoder(handle_unknown="ignore"), ["s"]),
                             ("num", "passthrough", ["a", "b"])])
    model = make_pipeline(pre, LogisticRegression()).fit(df, y)
    compiled = peregrine.compile(model, "native")
    part = df.iloc[:3][["b", "s", "a"]]
    few = prepare_input(part, compiled.spec)
    batch = _batch_path(part, compiled.spec, monkeypatch)
    assert few.dtype == batch.dtype
    np.testing.assert_array_equal(few, batch)


def test_numbers_in_a_string_column_take_the_general_path(monkeypatch):
    df = _frame(300)
    y = (df["x0"] > 0).astype(int)
    model = make_pipeline(ColumnTransformer([("ord", OrdinalEncoder(
        handle_unknown="use_encoded_value", unknown_value=-1), ["s0"])]),
        LogisticRegression()).fit(df, y)
    compiled = peregrine.compile(model, "native")
    part = df.iloc[:2].astype({"s0": object})
    part.iloc[1, 0] = 7  # an int among strings: unseen for the encoder
    np.testing.assert_array_equal(prepare_input(part, compiled.spec),
                                  _batch_path(part, compiled.spec, monkeypatch))


def test_unseen_category_error_names_the_column_and_value():
    compiled = peregrine.compile(_model("error"), "native")
    part = _frame(2)
    part.loc[1, "s1"] = "never-seen"
    with pytest.raises(InputError, match=r"'s1' holds 'never-seen' \(row 1\)"):
        compiled.predict(part)


def test_unread_columns_are_skipped_but_unknown_errors_still_raise():
    from sklearn.tree import DecisionTreeClassifier

    df = _frame(400)
    df["id"] = [f"row-{k}" for k in range(len(df))]  # dropped by the ColumnTransformer
    y = (df["s1"] == "c2").astype(int)
    pre = ColumnTransformer([("oh", OneHotEncoder(handle_unknown="error"), ["s0", "s1"])],
                            sparse_threshold=0)
    model = make_pipeline(pre, DecisionTreeClassifier(max_depth=1, random_state=0)).fit(df, y)
    compiled = peregrine.compile(model, "native")
    new = df.iloc[:3].copy()
    new["id"] = ["a", "b", "c"]  # never seen, never read: no error, as in scikit-learn
    np.testing.assert_array_equal(compiled.predict(new), model.predict(new))
    # s0's indicators are all dropped by the injection pass (the tree splits on s1 only), yet
    # an unseen s0 value still raises, as scikit-learn's encoder does
    assert "column(s) no longer computed" in compiled.explain()
    new.iloc[1, new.columns.get_loc("s0")] = "never-seen"
    with pytest.raises(ValueError):
        model.predict(new)
    with pytest.raises(InputError, match="'s0' holds 'never-seen'"):
        compiled.predict(new)
    with pytest.raises(InputError, match="'s0' holds 'never-seen'"):
        compiled.predict(pd.concat([new] * 30))  # the batch path too
