"""peregrine.dask.predict on a 2-process LocalCluster: same answers as the source model for
DataFrames and Arrays, artifact bytes shipped (not the source model), kernels built once per
worker process."""

from __future__ import annotations

import numpy as np
import pytest

dask = pytest.importorskip("dask")
dd = pytest.importorskip("dask.dataframe")
da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
pd = pytest.importorskip("pandas")
xgb = pytest.importorskip("xgboost")

import peregrine  # noqa: E402
import peregrine.dask  # noqa: E402
from peregrine.deploy import artifacts  # noqa: E402

pytestmark = pytest.mark.timeout(180)
RTOL, ATOL = 1e-5, 1e-6
COLUMNS = [f"f{j}" for j in range(8)]


@pytest.fixture
def client():
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=2,
            processes=True,
            dashboard_address=None,
            host="127.0.0.1",
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


@pytest.fixture(scope="module")
def xgb_model():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(6000, 8))
    X[rng.random(X.shape) < 0.03] = np.nan
    y = rng.integers(0, 3, size=6000)
    y[np.nan_to_num(X[:, 0]) > 0.5] = 2
    model = xgb.XGBClassifier(n_estimators=30, max_depth=5, random_state=0)
    model.fit(pd.DataFrame(X, columns=COLUMNS), y)  # feature names: frames matched by name
    return model, X


def test_on_a_local_cluster(client, xgb_model, tmp_path):
    """One test, so one cluster per test run (xdist would start one per worker otherwise)."""
    _dataframe_partitions_match_the_source_model(client, xgb_model, tmp_path)
    _arrays_chunked_any_way_match_the_source_model(xgb_model)


def _dataframe_partitions_match_the_source_model(client, xgb_model, tmp_path):
    model, X = xgb_model
    df = pd.DataFrame(X, columns=COLUMNS, index=np.arange(10_000, 10_000 + len(X)))
    ddf = dd.from_pandas(df[COLUMNS[::-1]], npartitions=9)  # reordered: matched by name
    path = tmp_path / "m.peregrine"
    peregrine.compile(model, backend="native").save(path)
    proba = peregrine.dask.predict(str(path), ddf, method="predict_proba")
    assert isinstance(proba, dd.DataFrame)
    assert list(proba.columns) == ["0", "1", "2"]
    out = proba.compute()
    np.testing.assert_allclose(out.to_numpy(), model.predict_proba(df), RTOL, ATOL)
    assert (out.index == df.index).all()
    labels = peregrine.dask.predict(str(path), ddf).compute()
    assert isinstance(labels, pd.Series) and labels.name == "predict"
    np.testing.assert_array_equal(labels.to_numpy(), model.predict(df))
    # two calls, 9 partitions each, 2 worker processes: kernels built once per process
    counts = client.run(artifacts.load_counts)
    key = artifacts.artifact_key(path.read_bytes())
    assert len(counts) == 2
    assert all(c.get(key) == 1 for c in counts.values()), counts


def _arrays_chunked_any_way_match_the_source_model(xgb_model):
    model, X = xgb_model
    compiled = peregrine.compile(model, backend="native")
    arr = da.from_array(X, chunks=(1000, 3))  # chunked along columns too: rechunked to rows
    out = peregrine.dask.predict(compiled, arr, method="predict_proba")
    assert isinstance(out, da.Array) and out.shape == (len(X), 3)
    df = pd.DataFrame(X, columns=COLUMNS)
    np.testing.assert_allclose(out.compute(), model.predict_proba(df), RTOL, ATOL)
    labels = peregrine.dask.predict(compiled, arr)
    assert labels.ndim == 1
    np.testing.assert_array_equal(labels.compute(), model.predict(df))


def test_source_model_is_compiled_and_shipped_as_an_artifact(xgb_model):
    """A fitted source model is compiled on the client: the graph holds artifact bytes, never
    the XGBoost object (local scheduler, no cluster needed)."""
    model, X = xgb_model
    ddf = dd.from_pandas(pd.DataFrame(X, columns=COLUMNS), npartitions=3)
    out = peregrine.dask.predict(model, ddf, method="predict_proba")
    graph = dict(out.__dask_graph__())
    assert not any(isinstance(v, xgb.XGBClassifier) for v in graph.values())
    with dask.config.set(scheduler="sync"):
        expected = model.predict_proba(pd.DataFrame(X, columns=COLUMNS))
        np.testing.assert_allclose(out.compute().to_numpy(), expected, RTOL, ATOL)


def test_strings_and_empty_partitions(tmp_path):
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    rng = np.random.default_rng(1)
    df = pd.DataFrame(
        {"color": rng.choice(["red", "green", "blue"], 300), "x1": rng.normal(size=300)}
    )
    y = np.where(df.x1 + (df.color == "red") > 0.5, "yes", "no")
    model = make_pipeline(
        ColumnTransformer([("oh", OneHotEncoder(), ["color"])], remainder="passthrough"),
        LogisticRegression(),
    ).fit(df, y)
    ordered = df.sort_values("x1").reset_index(drop=True)
    ddf = dd.from_pandas(ordered, npartitions=4)
    ddf = ddf[ddf.x1 > 0.3]  # the first partitions become empty
    kept = ordered[ordered.x1 > 0.3]
    with dask.config.set(scheduler="sync"):
        assert 0 in ddf.map_partitions(len).compute().tolist()
        labels = peregrine.dask.predict(model, ddf).compute()
        assert labels.tolist() == model.predict(kept).tolist()
        proba = peregrine.dask.predict(model, ddf, method="predict_proba").compute()
        np.testing.assert_allclose(proba.to_numpy(), model.predict_proba(kept), RTOL, ATOL)
        assert list(proba.columns) == ["no", "yes"]
        none = ddf[ddf.x1 > 100]  # no rows at all: the output type cannot be found by scoring
        with pytest.raises(peregrine.InputError, match="meta="):
            peregrine.dask.predict(model, none)
        meta = pd.Series(np.array([], dtype=object), name="label")
        assert len(peregrine.dask.predict(model, none, meta=meta).compute()) == 0


def test_bad_inputs_raise_typed_errors(xgb_model):
    model, X = xgb_model
    compiled = peregrine.compile(model, backend="native")
    with pytest.raises(peregrine.InputError, match="transform"):
        peregrine.dask.predict(compiled, da.from_array(X), method="transform")
    with pytest.raises(peregrine.InputError, match="5 features"):
        peregrine.dask.predict(compiled, da.from_array(X[:, :5]))
    with pytest.raises(peregrine.InputError, match="Series"):
        peregrine.dask.predict(compiled, dd.from_pandas(pd.Series(X[:, 0]), npartitions=1))
