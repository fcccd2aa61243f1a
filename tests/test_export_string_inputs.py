"""ONNX export with string inputs (``export_onnx(string_inputs=True)``, ``--string-inputs``):
each string column is a ``tensor(string)`` input ``[N, 1]`` coded inside the graph by an
ai.onnx.ml LabelEncoder, unseen strings as the compiled model's unknown categories, ``""`` as
the missing value (the NaN category); pandas categories with other categories stay codes in X.
Against scikit-learn / XGBoost on frames with unseen and missing values. Also the categories
metadata: NaN and None categories are told apart and read back (``categories_from_metadata``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pd = pytest.importorskip("pandas")

import peregrine  # noqa: E402
from peregrine.export import export_onnx  # noqa: E402
from peregrine.export.onnx import session  # noqa: E402
from peregrine.export.onnx_inputs import categories_from_metadata  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6
COLOURS = ["red", "green", "blue", "teal"]


def _frame(seed=0, n=600):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"x": rng.normal(size=n),
                       "colour": rng.choice(COLOURS, n).astype(object),
                       "z": rng.normal(size=n),
                       "shape": rng.choice(["disc", "cube", "cone"], n).astype(object)})
    df.loc[::11, "colour"] = np.nan
    y = ((df["colour"] == "red") + (df["shape"] == "cube") + df["x"] - 0.3 * df["z"] > 0.6)
    return df, y.astype(int)


def _pipeline(final=None):
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder, StandardScaler

    ct = ColumnTransformer([
        ("oh", OneHotEncoder(handle_unknown="ignore"), ["colour"]),
        ("ord", OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1),
         ["shape"]),
        ("num", StandardScaler(), ["x", "z"])])
    return make_pipeline(ct, final if final is not None else LogisticRegression())


def _feed(df, names=("colour", "shape"), numeric=("x", "z")):
    feed = {"X": df[list(numeric)].to_numpy(np.float64)} if numeric else {}
    for c in names:
        feed[c] = np.asarray([v if isinstance(v, str) else "" for v in df[c]],
                             dtype=object).reshape(-1, 1)
    return feed


def _test_rows():
    test, _ = _frame(seed=1, n=300)
    test.loc[test.index[::7], "colour"] = "purple"  # unseen
    test.loc[test.index[3::13], "shape"] = "sphere"  # unseen
    test.loc[test.index[5::17], "colour"] = np.nan  # missing: "" in the file
    return test


def test_string_columns_are_string_inputs(tmp_path):
    df, y = _frame()
    model = _pipeline().fit(df, y)
    path = tmp_path / "s.onnx"
    report = export_onnx(peregrine.compile(model), path, string_inputs=True)
    assert report.inputs == {"X": ("float64", ["N", 2]), "colour": ("object", ["N", 1]),
                             "shape": ("object", ["N", 1])}
    m = onnx.load(str(path))
    assert "LabelEncoder" in {n.op_type for n in m.graph.node}
    meta = {p.key: p.value for p in m.metadata_props}
    assert json.loads(meta["peregrine.string_inputs"]) == {"colour": 1, "shape": 3}
    assert json.loads(meta["peregrine.string_missing"]) == ""
    test = _test_rows()
    label, proba = session(path).run(["label", "probabilities"], _feed(test))
    assert np.array_equal(label, model.predict(test))
    np.testing.assert_allclose(proba, model.predict_proba(test), rtol=RTOL, atol=ATOL)


def test_the_compiled_models_method_takes_string_inputs(tmp_path):
    df, y = _frame()
    model = _pipeline().fit(df, y)
    path = tmp_path / "m.onnx"
    report = peregrine.compile(model).export_onnx(path, string_inputs=True)
    assert report.inputs["colour"] == ("object", ["N", 1])
    test = _test_rows()
    label, _ = session(path).run(["label", "probabilities"], _feed(test))
    assert np.array_equal(label, model.predict(test))


def test_string_inputs_with_a_sample_frame_and_fixed_batch(tmp_path):
    from sklearn.ensemble import HistGradientBoostingClassifier

    df, y = _frame(seed=3)
    model = _pipeline(HistGradientBoostingClassifier(max_iter=20)).fit(df, y)
    path = tmp_path / "h.onnx"
    report = export_onnx(peregrine.compile(model), path, string_inputs=True, batch=50,
                         sample=_test_rows().iloc[:120])
    assert report.rows == 120
    rows = _test_rows().iloc[:60].to_numpy(object)  # an object array as the sample
    assert export_onnx(peregrine.compile(model), tmp_path / "o.onnx", string_inputs=True,
                       sample=rows).rows == 60
    test = _test_rows().iloc[:50]
    label, proba = session(path).run(["label", "probabilities"], _feed(test))
    assert np.array_equal(label, model.predict(test))
    np.testing.assert_allclose(proba, model.predict_proba(test), rtol=RTOL, atol=ATOL)


def test_only_string_columns_need_no_x(tmp_path):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    df, y = _frame(seed=5)
    df = df[["colour", "shape"]]
    model = make_pipeline(OneHotEncoder(handle_unknown="ignore"), LogisticRegression())
    model.fit(df, y)
    path = tmp_path / "o.onnx"
    report = export_onnx(peregrine.compile(model), path, string_inputs=True)
    assert set(report.inputs) == {"colour", "shape"}
    test = _test_rows()[["colour", "shape"]]
    label, proba = session(path).run(["label", "probabilities"], _feed(test, numeric=()))
    assert np.array_equal(label, model.predict(test))
    np.testing.assert_allclose(proba, model.predict_proba(test), rtol=RTOL, atol=ATOL)


def test_pandas_string_categories_as_strings_integer_ones_as_codes(tmp_path):
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(2)
    n = 500
    letters = [f"k{i}" for i in range(9)]
    df = pd.DataFrame({"a": rng.normal(size=n),
                       "city": pd.Categorical(rng.choice(letters, n), categories=letters),
                       "size": pd.Categorical(rng.choice([30, 10, 20], n))})
    df.loc[::9, "city"] = np.nan
    y = ((df["city"].cat.codes % 3 == 0) + df["a"] + (df["size"] == 20) > 0.7).astype(int)
    model = xgb.XGBClassifier(n_estimators=10, max_depth=4, enable_categorical=True,
                              max_cat_to_onehot=1).fit(df, y)
    path = tmp_path / "x.onnx"
    report = export_onnx(peregrine.compile(model), path, string_inputs=True)
    assert report.inputs == {"X": ("float64", ["N", 2]), "city": ("object", ["N", 1])}
    test = df.iloc[:200].copy()
    city = test["city"].astype(object).to_numpy().copy()
    city[::10] = "k99"  # unseen: NaN (missing) in the category column below
    size = test["size"].cat.codes.to_numpy().astype(np.float64)
    feed = {"X": np.column_stack([test["a"].to_numpy(), size]),
            "city": np.asarray([v if isinstance(v, str) else "" for v in city],
                               object).reshape(-1, 1)}
    label, proba = session(path).run(["label", "probabilities"], feed)
    known = [v if v in letters else np.nan for v in city]
    want = test.assign(city=pd.Categorical(known, categories=letters))
    assert np.array_equal(label, model.predict(want))
    np.testing.assert_allclose(proba, model.predict_proba(want), rtol=RTOL, atol=ATOL)


def test_cli_string_inputs(tmp_path, capsys):
    from peregrine.cli import main

    df, y = _frame(seed=6, n=300)
    model = _pipeline().fit(df, y)
    artifact = tmp_path / "m.peregrine"
    peregrine.compile(model).save(artifact)
    out = tmp_path / "m.onnx"
    assert main(["export", str(artifact), "--format", "onnx", "-o", str(out),
                 "--string-inputs"]) == 0
    text = capsys.readouterr().out
    assert "input  colour: object" in text and "validated" in text
    test = _test_rows()
    label = session(out).run(["label"], _feed(test))[0]
    assert np.array_equal(label, model.predict(test))


def test_nan_and_none_categories_round_trip_through_the_metadata(tmp_path):
    """A pipeline's string vocabulary holds NaN (code 0) and None (code 1); the metadata
    writes them apart and categories_from_metadata reads the vocabulary back; the codes file
    scores the codes the runtime gives NaN and None as scikit-learn scores them (scikit-learn
    1.9 fits None as NaN here: both take the NaN category)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OrdinalEncoder

    rng = np.random.default_rng(7)
    n = 400
    col = rng.choice(["a", "b", "c"], n).astype(object)
    col[::7] = None
    df = pd.DataFrame({"k": col})
    y = (rng.random(n) < 0.5).astype(int)
    model = make_pipeline(OrdinalEncoder(encoded_missing_value=-1), LogisticRegression())
    model.fit(df, y)
    compiled = peregrine.compile(model)
    path = tmp_path / "v.onnx"
    export_onnx(compiled, path)
    meta = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    raw = json.loads(meta["peregrine.category_codes.k"])
    assert raw[:2] == [{"missing": "nan"}, {"missing": "none"}]
    cats = categories_from_metadata(meta["peregrine.category_codes.k"])
    want = compiled.spec.category_maps[0]
    assert len(cats) == len(want)
    assert cats[0] != cats[0] and cats[1] is None and cats[2:] == want[2:]
    rows = pd.DataFrame({"k": np.asarray([np.nan, None, "a", "b"], dtype=object)})
    X = compiled.model_input(rows)
    assert X[0, 0] == 0 and X[2, 0] == cats.index("a")
    label, proba = session(path).run(["label", "probabilities"], {"X": X})
    assert np.array_equal(label, model.predict(rows))
    np.testing.assert_allclose(proba, model.predict_proba(rows), rtol=RTOL, atol=ATOL)


def test_triton_repository_with_string_inputs(tmp_path):
    from peregrine.export import write_triton_repository

    df, y = _frame(seed=8, n=300)
    model = _pipeline().fit(df, y)
    report = write_triton_repository(peregrine.compile(model), tmp_path / "repo", name="m",
                                     string_inputs=True)
    config = (tmp_path / "repo" / "m" / "config.pbtxt").read_text()
    assert 'name: "colour"' in config and "TYPE_STRING" in config
    label = session(report.path).run(["label"], _feed(_test_rows()))[0]
    assert np.array_equal(label, model.predict(_test_rows()))


def test_handle_unknown_error_column_validates_on_known_strings(tmp_path):
    """An encoder with handle_unknown='error' rejects unseen and missing strings in the
    compiled model (the file cannot raise): the generated validation rows give that column
    mostly known strings, so most rows are validated, not left out."""
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OrdinalEncoder

    df, y = _frame(seed=9, n=400)
    df = df.assign(colour=df["colour"].fillna("red"))
    model = make_pipeline(ColumnTransformer([("o", OrdinalEncoder(), ["colour", "shape"])],
                                            remainder="passthrough"),
                          HistGradientBoostingClassifier(max_iter=10)).fit(df, y)
    path = tmp_path / "e.onnx"
    report = export_onnx(peregrine.compile(model), path, string_inputs=True)
    assert report.rows > 300
    test, _ = _frame(seed=10, n=100)
    test = test.assign(colour=test["colour"].fillna("green"))
    label, proba = session(path).run(["label", "probabilities"], _feed(test))
    assert np.array_equal(label, model.predict(test))
    np.testing.assert_allclose(proba, model.predict_proba(test), rtol=RTOL, atol=ATOL)
