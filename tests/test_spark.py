"""peregrine.spark.predict_udf on a real local Spark session: the same answers as the source
model on a few thousand rows, columns matched by name, strings encoded, typed errors."""

from __future__ import annotations

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
xgb = pytest.importorskip("xgboost")
pytest.importorskip("pyspark")

import peregrine  # noqa: E402
import peregrine.spark  # noqa: E402
from tests.conftest_spark import spark  # noqa: E402, F401  (the shared session fixture)
from tests.deploy_models import string_pipeline  # noqa: E402

pytestmark = pytest.mark.timeout(300)
RTOL, ATOL = 1e-5, 1e-6
COLUMNS = [f"f{j}" for j in range(8)]


@pytest.fixture(scope="module")
def xgb_model():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4000, 8))
    X[rng.random(X.shape) < 0.03] = np.nan
    y = rng.integers(0, 3, size=4000)
    y[np.nan_to_num(X[:, 0]) > 0.5] = 2
    df = pd.DataFrame(X, columns=COLUMNS)
    model = xgb.XGBClassifier(n_estimators=30, max_depth=5, random_state=0).fit(df, y)
    return model, df


def test_udfs_on_a_local_session(spark, xgb_model, tmp_path):  # noqa: F811
    """One test, so one JVM per test run (xdist would start one per worker otherwise)."""
    _udf_matches_the_source_model(spark, xgb_model, tmp_path)
    _udf_with_strings_and_a_source_model(spark)


def _udf_matches_the_source_model(spark, xgb_model, tmp_path):  # noqa: F811
    model, df = xgb_model
    path = tmp_path / "m.peregrine"
    peregrine.compile(model, backend="native").save(path)
    proba = peregrine.spark.predict_udf(str(path), spark=spark)
    labels = peregrine.spark.predict_udf(str(path), method="predict", spark=spark)
    assert proba.broadcast is not None  # the artifact bytes go out as a broadcast variable
    sdf = spark.createDataFrame(df[COLUMNS[::-1]].assign(id=np.arange(len(df)))).repartition(3)
    out = (
        sdf.select("id", proba().alias("proba"), labels().alias("label"))
        .toPandas()
        .sort_values("id")
    )
    np.testing.assert_allclose(
        np.stack(out["proba"].to_numpy()), model.predict_proba(df), RTOL, ATOL
    )
    np.testing.assert_array_equal(out["label"].to_numpy(), model.predict(df))
    # columns named explicitly, by name: a renamed DataFrame column under its model name
    renamed = sdf.withColumnRenamed("f3", "third")
    cols = [renamed["third"].alias("f3") if c == "f3" else c for c in COLUMNS]
    out2 = renamed.select("id", proba(*cols).alias("p")).toPandas().sort_values("id")
    np.testing.assert_allclose(np.stack(out2["p"].to_numpy()), model.predict_proba(df), RTOL, ATOL)


def _udf_with_strings_and_a_source_model(spark):  # noqa: F811
    model, df = string_pipeline(2000)
    udf = peregrine.spark.predict_udf(model, method="predict", spark=spark)  # compiled here
    sdf = spark.createDataFrame(df.assign(id=np.arange(len(df))))
    out = sdf.select("id", udf().alias("label")).toPandas().sort_values("id")
    assert out["label"].tolist() == model.predict(df).tolist()
    bad = spark.createDataFrame(pd.DataFrame({"color": ["purple"], "x1": [1.0], "x2": [2.0]}))
    with pytest.raises(Exception, match="purple"):  # the model's InputError, through Spark
        bad.select(udf()).collect()


def test_bad_arguments_raise_typed_errors(xgb_model):
    """Checked on the driver, before any Spark session is needed."""
    model, df = xgb_model
    compiled = peregrine.compile(model, backend="native")
    with pytest.raises(peregrine.InputError, match="transform"):
        peregrine.spark.predict_udf(compiled, method="transform")
    nameless = xgb.XGBClassifier(n_estimators=3).fit(df.to_numpy(), np.arange(len(df)) % 2)
    udf = peregrine.spark.predict_udf(peregrine.compile(nameless, backend="native"))
    with pytest.raises(peregrine.InputError, match="feature names"):
        udf()


def test_executors_build_one_thread_kernels_by_default(xgb_model, tmp_path):
    """threads=1 (the default): the kernels a Python worker builds use one thread, whatever
    the artifact would pick on its own (all the CPUs this process may use)."""
    from peregrine.deploy import artifacts

    model, _ = xgb_model
    data = artifacts.artifact_bytes(peregrine.compile(model, backend="native"))
    shipped = peregrine.spark._Shipped(data, artifacts.artifact_key(data), None)
    artifacts.clear_cache()
    built = peregrine.spark._load_on_executor(shipped, None, 1)
    choices = built.explain_dict()["backend_choices"]
    assert [v for k, v in choices.items() if k.endswith(" threads")] == [1]
    artifacts.clear_cache()
