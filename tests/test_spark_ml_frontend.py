"""Saved Spark ML PipelineModels compiled without a JVM, against Spark's own ``transform`` on a
local session (tests/conftest_spark.py): every supported stage, NaN (Spark's null) where Spark
accepts it, string categories with unseen values and nulls, categorical tree splits, multiclass,
on every backend. Pipelines are fitted once per module (the session start is the slow part)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

import peregrine  # noqa: E402
from peregrine.errors import InputError, UnsupportedModelError  # noqa: E402
from peregrine.formats.spark_ml import SparkPipelineModel  # noqa: E402
from peregrine.sources import ModelFileError, ModelFormat, load_model  # noqa: E402
from tests.conftest_spark import spark  # noqa: E402, F401  (the shared session fixture)

pytestmark = pytest.mark.timeout(600)
BACKENDS = ("reference", "torch", "torchscript", "native")
# float64 end to end; what differs from Spark is summation order (BLAS dot products, numpy's
# row sums) and exp's last bit: measured max relative difference ~1e-15
RTOL, ATOL = 1e-12, 1e-12

# (case, feature pipeline, model factory, label column)
CASES = {
    "dt_classifier": ("trees", "DecisionTreeClassifier", "y3"),
    "rf_classifier": ("trees", "RandomForestClassifier", "y3"),
    "gbt_classifier": ("scaled", "GBTClassifier", "y2"),
    "dt_regressor": ("trees", "DecisionTreeRegressor", "yr"),
    "rf_regressor": ("trees", "RandomForestRegressor", "yr"),
    "gbt_regressor": ("trees", "GBTRegressor", "yr"),
    "lr_multinomial": ("linear", "LogisticRegression", "y3"),
    "lr_binomial": ("linear", "LogisticRegression", "y2"),
    "linear_regression": ("linear", "LinearRegression", "yr"),
}


def _frame(n: int, seed: int, test: bool) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=n)
    b = rng.normal(size=n) * 2
    c = rng.choice(["red", "green", "blue"], size=n, p=[0.5, 0.3, 0.2]).astype(object)
    e = np.ones(n)  # constant when fitting: StandardScaler std 0, MinMaxScaler's 0.5
    if test:
        a[rng.random(n) < 0.15] = np.nan  # imputed
        c[rng.random(n) < 0.1] = "violet"  # unseen: StringIndexer(handleInvalid='keep')
        c[rng.random(n) < 0.05] = None
        e[rng.random(n) < 0.2] = 3.0
        e[:2] = [np.inf, -np.inf]
        b[5::17] = np.round(b[5::17])  # exactly on Bucketizer splits
    score = np.nan_to_num(a) + 0.5 * b + (c == "red")
    return pd.DataFrame({
        "a": a, "b": b, "c": c, "e": e,
        "y3": np.digitize(score + rng.normal(size=n) * 0.3, [-0.5, 0.8]).astype(float),
        "y2": (score > 0.3).astype(float), "yr": score + rng.normal(size=n) * 0.1,
    })


def _feature_stages(kind: str):
    from pyspark.ml.feature import (
        Bucketizer,
        Imputer,
        MaxAbsScaler,
        MinMaxScaler,
        OneHotEncoder,
        StandardScaler,
        StringIndexer,
        VectorAssembler,
    )

    index = StringIndexer(inputCol="c", outputCol="ci", handleInvalid="keep")
    impute = Imputer(inputCols=["a"], outputCols=["ai"], strategy="median")
    if kind == "trees":  # categorical splits on ci and the buckets; NaN b reaches the trees
        bucket = Bucketizer(splits=[-float("inf"), -1.0, 0.0, 1.0, float("inf")],
                            inputCol="b", outputCol="bb", handleInvalid="keep")
        assemble = VectorAssembler(inputCols=["ai", "b", "ci", "bb", "e"], outputCol="features",
                                   handleInvalid="keep")
        return [index, impute, bucket, assemble]
    onehot = OneHotEncoder(inputCols=["ci"], outputCols=["co"], handleInvalid="keep")
    assemble = VectorAssembler(inputCols=["ai", "b", "co", "e"], outputCol="raw")
    scale = StandardScaler(inputCol="raw", outputCol="features" if kind == "linear" else "s1",
                           withMean=True, withStd=True)
    stages = [index, impute, onehot, assemble, scale]
    if kind == "scaled":
        stages += [MinMaxScaler(inputCol="s1", outputCol="s2", min=-1.0, max=2.0),
                   MaxAbsScaler(inputCol="s2", outputCol="features")]
    return stages


def _model(name: str, label: str, case: str):
    from pyspark.ml import classification, regression

    kw = {"featuresCol": "features", "labelCol": label}
    if name in ("DecisionTreeClassifier", "DecisionTreeRegressor"):
        kw["maxDepth"] = 5
    if name.startswith("RandomForest"):
        kw.update(numTrees=8, maxDepth=4, seed=1)
    if name.startswith("GBT"):
        kw.update(maxIter=6, maxDepth=3, seed=1)
    if case == "lr_binomial":
        kw["threshold"] = 0.3
    if case == "lr_multinomial":
        kw["regParam"] = 0.01
    module = classification if hasattr(classification, name) else regression
    return getattr(module, name)(**kw)


class _Saved:
    """Pipelines fitted and saved on first use (only what the selected tests need), with
    Spark's own transform of the test frame."""

    def __init__(self, spark, root) -> None:  # noqa: F811
        self.spark, self.root = spark, root
        self.test = _frame(300, 1, test=True)
        self._train = self._test_sdf = None
        self._features: dict = {}
        self._cases: dict = {}

    def features(self, kind: str):
        from pyspark.ml import Pipeline

        if self._train is None:
            self._train = self.spark.createDataFrame(_frame(400, 0, test=False)).cache()
            self._test_sdf = self.spark.createDataFrame(
                self.test.assign(id=np.arange(len(self.test))))
        if kind not in self._features:
            fitted = Pipeline(stages=_feature_stages(kind)).fit(self._train)
            self._features[kind] = (fitted, fitted.transform(self._train).cache())
        return self._features[kind]

    def __getitem__(self, case: str):
        """(saved directory, test frame, Spark's output columns as arrays)."""
        from pyspark.ml import PipelineModel

        if case not in self._cases:
            kind, name, label = CASES[case]
            fitted, data = self.features(kind)
            model = _model(name, label, case).fit(data)
            pipeline = PipelineModel(stages=[*fitted.stages, model])
            path = str(self.root / case)
            pipeline.write().overwrite().save(path)
            cols = ["prediction"] + (["probability", "rawPrediction"] if _classifier(case)
                                     else [])
            got = (pipeline.transform(self._test_sdf).select("id", *cols).toPandas()
                   .sort_values("id"))
            out = {c: (np.stack([v.toArray() for v in got[c]]) if c != "prediction"
                       else got[c].to_numpy()) for c in cols}
            self._cases[case] = (path, self.test, out)
        return self._cases[case]


def _classifier(case: str) -> bool:
    return "classifier" in case or case.startswith("lr_")


@pytest.fixture(scope="module")
def saved(spark, tmp_path_factory):  # noqa: F811
    return _Saved(spark, tmp_path_factory.mktemp("spark_ml"))


_compiled: dict[tuple[str, str], object] = {}


def _compile(path: str, backend: str):
    key = (path, backend)
    if key not in _compiled:
        _compiled[key] = peregrine.compile(path, backend=backend)
    return _compiled[key]


# every stage, NaN, strings, categorical splits and multiclass in the default run; the other
# models in the slow matrix
QUICK = ("rf_classifier", "gbt_classifier", "lr_multinomial")
METHODS = {"prediction": "predict", "probability": "predict_proba",
           "rawPrediction": "decision_function"}
MATRIX = [pytest.param(c, marks=() if c in QUICK else pytest.mark.slow) for c in sorted(CASES)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", MATRIX)
def test_matches_spark_transform(saved, case, backend):
    path, test, expected = saved[case]
    compiled = _compile(path, backend)
    X = test[list(compiled.spec.feature_names)]
    assert set(compiled.methods) == {METHODS[c] for c in expected}
    if _classifier(case):  # class indices: identical
        np.testing.assert_array_equal(compiled.predict(X), expected["prediction"])
    else:
        np.testing.assert_allclose(compiled.predict(X), expected["prediction"], rtol=RTOL,
                                   atol=ATOL)
    if "probability" in expected:
        np.testing.assert_allclose(compiled.predict_proba(X), expected["probability"],
                                   rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(compiled.decision_function(X), expected["rawPrediction"],
                                   rtol=RTOL, atol=ATOL)


def test_methods_are_the_spark_columns(saved):
    """The method audit's entry for SparkPipelineModel (tests/test_method_audit.py): a
    classifier's prediction, probability and rawPrediction columns, a regressor's prediction,
    a feature pipeline's last output column as transform (test below)."""
    for case in QUICK:  # regressors: in the matrix
        path, _, expected = saved[case]
        assert set(_compile(path, "reference").methods) == {METHODS[c] for c in expected}


def test_inputs_are_the_columns_the_methods_need(saved):
    path, _, _ = saved["rf_classifier"]
    compiled = _compile(path, "reference")
    # the label columns are never inputs; strings are mapped by the StringIndexer's labels
    assert compiled.spec.feature_names == ("c", "a", "b", "e")  # first read first
    assert set(compiled.spec.category_maps[0]) == {"red", "green", "blue"}


def test_rows_spark_rejects_raise(saved):
    path, test, _ = saved["lr_multinomial"]
    compiled = _compile(path, "native")
    X = test[list(compiled.spec.feature_names)].copy()
    X.loc[3, "b"] = np.nan  # VectorAssembler(handleInvalid='error') raises on a null
    with pytest.raises(InputError, match=r"row 3 in column 'b'.*VectorAssembler"):
        compiled.predict(X)
    X.loc[3, "b"] = 0.0
    X.loc[4, "a"] = np.nan  # imputed first: fine
    compiled.predict(X)


def test_artifact_round_trip(saved, tmp_path):
    path, test, expected = saved["rf_classifier"]
    compiled = _compile(path, "native")
    compiled.save(tmp_path / "m.peregrine")
    loaded = peregrine.load(tmp_path / "m.peregrine")
    X = test[list(compiled.spec.feature_names)]
    np.testing.assert_array_equal(loaded.predict(X), expected["prediction"])


def test_cli_compiles_the_directory(saved, tmp_path, capsys):
    from peregrine.cli import main

    path, test, expected = saved["lr_multinomial"]
    assert main(["compile", path, "-o", str(tmp_path / "m.peregrine"), "--backend",
                 "reference"]) == 0
    assert "spark-ml" in capsys.readouterr().out
    loaded = peregrine.load(tmp_path / "m.peregrine")
    np.testing.assert_array_equal(loaded.predict(test[list(loaded.spec.feature_names)]),
                                  expected["prediction"])


def test_loader_reads_the_directory(saved):
    path, _, _ = saved["gbt_classifier"]
    loaded = load_model(path)
    assert loaded.format is ModelFormat.SPARK_ML
    assert isinstance(loaded.model, SparkPipelineModel)
    assert [s.name for s in loaded.model.stages][-1] == "GBTClassificationModel"
    with pytest.raises(ModelFileError, match="directory"):
        load_model(os.path.dirname(path))  # a directory, but no saved model


def test_unsupported_stage_is_named(spark, tmp_path):  # noqa: F811
    from pyspark.ml import PipelineModel
    from pyspark.ml.feature import Normalizer, VectorAssembler

    pipeline = PipelineModel(stages=[
        VectorAssembler(inputCols=["a", "b"], outputCol="v"),
        Normalizer(inputCol="v", outputCol="n"),
    ])
    pipeline.write().overwrite().save(str(tmp_path / "p"))
    with pytest.raises(UnsupportedModelError, match=r"Normalizer .*1_Normalizer"):
        peregrine.compile(str(tmp_path / "p"))


def test_transformer_pipeline_compiles_transform(spark, tmp_path):  # noqa: F811
    from pyspark.ml import PipelineModel
    from pyspark.ml.feature import Bucketizer, VectorAssembler

    pipeline = PipelineModel(stages=[
        Bucketizer(splits=[-1.0, 0.0, 1.0], inputCol="b", outputCol="bb", handleInvalid="keep"),
        VectorAssembler(inputCols=["a", "bb"], outputCol="v", handleInvalid="keep"),
    ])
    pipeline.write().overwrite().save(str(tmp_path / "p"))
    df = pd.DataFrame({"a": [1.0, np.nan, 3.0, 4.0], "b": [-1.0, 0.5, np.nan, 1.0]})
    sdf = spark.createDataFrame(df.assign(id=np.arange(4)))
    got = pipeline.transform(sdf).select("id", "v").toPandas().sort_values("id")
    expected = np.stack([v.toArray() for v in got["v"]])
    compiled = peregrine.compile(str(tmp_path / "p"), backend="reference")
    np.testing.assert_array_equal(compiled.transform(df), expected)
    with pytest.raises(InputError, match="outside its splits"):
        compiled.transform(pd.DataFrame({"a": [1.0], "b": [2.0]}))
    meta = json.loads(open(next((tmp_path / "p" / "metadata").glob("part-*"))).read())
    assert meta["class"] == "org.apache.spark.ml.PipelineModel"


def test_error_and_skip_rules_match_spark(spark, tmp_path):  # noqa: F811
    """StringIndexer(error), OneHotEncoder(error) on a raw column with fractional values (Spark
    truncates them), Bucketizer(skip): Spark's values on valid rows, InputError on the rows
    Spark raises on or drops."""
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import Bucketizer, OneHotEncoder, StringIndexer, VectorAssembler

    train = pd.DataFrame({"s": ["x", "y", "y", "z"], "k": [0.0, 1.0, 2.0, 2.0],
                          "b": [0.1, 0.5, 0.9, 0.2]})
    pipeline = Pipeline(stages=[
        StringIndexer(inputCol="s", outputCol="si", stringOrderType="alphabetDesc"),
        OneHotEncoder(inputCols=["si", "k"], outputCols=["so", "ko"], dropLast=False),
        Bucketizer(splits=[0.0, 0.5, 1.0], inputCol="b", outputCol="bb", handleInvalid="skip"),
        VectorAssembler(inputCols=["so", "ko", "bb"], outputCol="v"),
    ]).fit(spark.createDataFrame(train))
    pipeline.write().overwrite().save(str(tmp_path / "p"))
    rows = pd.DataFrame({"s": ["z", "x", "y"], "k": [1.5, 0.0, 2.9], "b": [1.0, 0.5, 0.0]})
    got = (pipeline.transform(spark.createDataFrame(rows.assign(id=np.arange(3))))
           .select("id", "v").toPandas().sort_values("id"))
    compiled = peregrine.compile(str(tmp_path / "p"), backend="native")
    np.testing.assert_array_equal(compiled.transform(rows[["s", "k", "b"]]),
                                  np.stack([v.toArray() for v in got["v"]]))
    for column, value, match in (("s", "w", "unseen"), ("s", None, "null"),
                                 ("k", 3.0, "past the categories"), ("k", -0.5, "negative"),
                                 ("b", np.nan, "drops this row")):
        bad = rows[["s", "k", "b"]].copy()
        bad.loc[1, column] = value
        with pytest.raises(InputError, match=match):
            compiled.transform(bad)


def test_index_to_string_after_the_model(saved, spark, tmp_path):  # noqa: F811
    """The usual round trip: a label StringIndexer, a classifier, IndexToString(prediction)
    with the indexer's labels; predict returns Spark's predictedLabel strings (the label
    indexer and its string column are not inputs)."""
    from pyspark.ml import PipelineModel
    from pyspark.ml.classification import RandomForestClassifier
    from pyspark.ml.feature import IndexToString, StringIndexer

    fitted, data = saved.features("trees")
    names = {0.0: "low", 1.0: "mid", 2.0: "high"}
    data = data.withColumn("ys", data.y3.cast("int").cast("string"))
    label_index = StringIndexer(inputCol="ys", outputCol="yi").fit(data)
    model = RandomForestClassifier(featuresCol="features", labelCol="yi", numTrees=5,
                                   maxDepth=4, seed=2).fit(label_index.transform(data))
    back = IndexToString(inputCol="prediction", outputCol="predictedLabel",
                         labels=[names[float(v)] for v in label_index.labels])
    pipeline = PipelineModel(stages=[*fitted.stages, label_index, model, back])
    path = str(tmp_path / "its")
    pipeline.write().overwrite().save(path)
    test = saved.test
    want = (pipeline.transform(saved._test_sdf).select("id", "predictedLabel").toPandas()
            .sort_values("id")["predictedLabel"].to_numpy())
    for backend in ("reference", "native"):
        compiled = peregrine.compile(path, backend=backend)
        assert "ys" not in compiled.spec.feature_names
        got = compiled.predict(test[list(compiled.spec.feature_names)])
        np.testing.assert_array_equal(got, want)
    short = IndexToString(inputCol="prediction", outputCol="p", labels=["only"])
    PipelineModel(stages=[*fitted.stages, model, short]).write().overwrite().save(
        str(tmp_path / "short"))
    with pytest.raises(UnsupportedModelError, match="1 labels for 3 classes"):
        peregrine.compile(str(tmp_path / "short"), backend="reference")
