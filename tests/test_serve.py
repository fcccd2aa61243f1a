"""`peregrine serve`'s app in-process on a free loopback port: every format and route answers
what the source model answers, every bad request gets a typed 4xx, and the server keeps serving
after each."""

from __future__ import annotations

import concurrent.futures
import io
import json

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")
xgb = pytest.importorskip("xgboost")

import peregrine  # noqa: E402
from peregrine.deploy import ServeConfig, create_app  # noqa: E402
from peregrine.deploy.formats import load_npy  # noqa: E402
from peregrine.deploy.testing import running_server  # noqa: E402
from tests.deploy_models import string_pipeline  # noqa: E402

pytestmark = pytest.mark.timeout(120)

RTOL, ATOL = 1e-5, 1e-6
N_FEATURES = 12
NPY, ARROW = "application/x-npy", "application/vnd.apache.arrow.stream"


def _rows(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, N_FEATURES))
    X[rng.random(X.shape) < 0.05] = np.nan  # XGBoost sends missing values to default children
    return X


@pytest.fixture(scope="module")
def xgb_model(tmp_path_factory):
    X = _rows(2000, 0)
    y = (np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) ** 2 > 0.7).astype(int)
    model = xgb.XGBClassifier(n_estimators=40, max_depth=5, random_state=0).fit(X, y)
    path = tmp_path_factory.mktemp("serve") / "xgb.peregrine"
    peregrine.compile(model, backend="native").save(path)
    return model, str(path)


@pytest.fixture(scope="module")
def xgb_server(xgb_model):
    _, path = xgb_model
    app = create_app(ServeConfig(path, max_batch=256, max_delay_ms=2, max_body_bytes=1 << 20))
    with running_server(app) as url:
        yield url, app


@pytest.fixture(scope="module")
def pipeline_model(tmp_path_factory):
    model, df = string_pipeline(400)
    path = tmp_path_factory.mktemp("serve") / "pipe.peregrine"
    peregrine.compile(model, backend="native").save(path)
    return model, str(path), df


@pytest.fixture(scope="module")
def pipeline_server(pipeline_model):
    _, path, _ = pipeline_model
    with running_server(create_app(ServeConfig(path))) as url:
        yield url


def _post_json(url, doc, **kw):
    return httpx.post(
        url, content=json.dumps(doc), headers={"Content-Type": "application/json"}, timeout=30, **kw
    )


def _json_rows(X: np.ndarray) -> list:
    return [[None if np.isnan(v) else float(v) for v in row] for row in X]


def _npy(X: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, X, allow_pickle=False)
    return buf.getvalue()


def _arrow(df) -> bytes:
    table = pa.Table.from_pandas(df, preserve_index=False)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _assert_healthy(url):
    r = httpx.get(f"{url}/healthz", timeout=10)
    assert r.status_code == 200 and r.json() == {"status": "ok"}


def _assert_still_scores(url, model):
    X = _rows(3, 99)
    r = _post_json(f"{url}/v1/predict_proba", {"rows": _json_rows(X)})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json()["predictions"], model.predict_proba(X), RTOL, ATOL)


# ------------------------------------------------------------------------------ answers --
def test_json_rows_match_the_source_model(xgb_model, xgb_server):
    model, _ = xgb_model
    url, _ = xgb_server
    X = _rows(50, 2)
    r = _post_json(f"{url}/v1/predict_proba", {"rows": _json_rows(X)})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    doc = r.json()
    np.testing.assert_allclose(doc["predictions"], model.predict_proba(X), RTOL, ATOL)
    assert doc["classes"] == [0, 1]
    r = _post_json(f"{url}/v1/predict", {"rows": _json_rows(X[:1])})
    assert r.json()["predictions"] == model.predict(X[:1]).tolist()


def test_npy_and_arrow_bodies_answer_in_kind(xgb_model, xgb_server):
    model, _ = xgb_model
    url, _ = xgb_server
    X = _rows(700, 3)
    for X_in in (X, X.astype(np.float32)):
        r = httpx.post(
            f"{url}/v1/predict_proba", content=_npy(X_in), headers={"Content-Type": NPY}, timeout=30
        )
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == NPY
        out = load_npy(r.content)
        np.testing.assert_allclose(out, model.predict_proba(X_in), RTOL, ATOL)
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(N_FEATURES)])
    r = httpx.post(
        f"{url}/v1/predict", content=_arrow(df), headers={"Content-Type": ARROW}, timeout=30
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == ARROW
    table = pa.ipc.open_stream(r.content).read_all()
    assert table.column_names == ["predictions"]
    np.testing.assert_array_equal(table.column(0).to_numpy(), model.predict(X))
    r = httpx.post(
        f"{url}/v1/predict_proba", content=_arrow(df), headers={"Content-Type": ARROW}, timeout=30
    )
    table = pa.ipc.open_stream(r.content).read_all()
    assert table.column_names == ["0", "1"]
    np.testing.assert_allclose(table.to_pandas().to_numpy(), model.predict_proba(X), RTOL, ATOL)


def test_columns_json_with_strings_matched_by_name(pipeline_model, pipeline_server):
    model, _, df = pipeline_model
    url = pipeline_server
    part = df.iloc[:40]
    reordered = {c: part[c].tolist() for c in ["x2", "color", "x1"]}  # names, not positions
    r = _post_json(f"{url}/v1/predict_proba", {"columns": reordered})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json()["predictions"], model.predict_proba(part), RTOL, ATOL)
    assert r.json()["classes"] == ["no", "yes"]
    r = _post_json(f"{url}/v1/predict", {"rows": part.to_numpy(dtype=object).tolist()})
    assert r.status_code == 200, r.text
    assert r.json()["predictions"] == model.predict(part).tolist()
    # string labels over Arrow and .npy (unicode, no pickles)
    r = httpx.post(f"{url}/v1/predict", content=_arrow(part), headers={"Content-Type": ARROW})
    assert (
        pa.ipc.open_stream(r.content).read_all().column(0).to_pylist()
        == model.predict(part).tolist()
    )


def test_model_health_and_metrics_routes(xgb_model, xgb_server):
    url, app = xgb_server
    _assert_healthy(url)
    doc = httpx.get(f"{url}/v1/model", timeout=10).json()
    assert doc["methods"] == ["predict", "predict_proba"]
    assert doc["n_features"] == N_FEATURES and doc["classes"] == [0, 1]
    assert len(doc["content_hash"]) == 64
    assert doc["versions"]["peregrine"] == peregrine.__version__
    assert doc["explain"]["backend"] == "native"
    _assert_still_scores(url, xgb_model[0])
    text = httpx.get(f"{url}/metrics", timeout=10).text
    for name in (
        "peregrine_requests_total",
        "peregrine_request_duration_seconds_bucket",
        "peregrine_batch_rows_bucket",
        "peregrine_model_calls_total",
        "peregrine_errors_total",
    ):
        assert name in text
    assert 'peregrine_requests_total{format="application/json",method="predict_proba"' in text


# ------------------------------------------------------------------------------- errors --
BAD_REQUESTS = [
    # (name, route, body, content type, status, words the message must hold)
    ("malformed JSON", "predict", b'{"rows": [[1, 2,', "application/json", 400, ["JSON"]),
    ("not rows or columns", "predict", b'{"data": 1}', "application/json", 400, ["rows"]),
    (
        "ragged rows",
        "predict",
        json.dumps({"rows": [[1.0] * 12, [1.0] * 11]}).encode(),
        "application/json",
        400,
        ["row 1", "11"],
    ),
    (
        "wrong feature count",
        "predict",
        json.dumps({"rows": [[1.0, 2.0, 3.0]]}).encode(),
        "application/json",
        400,
        ["3 features", "12"],
    ),
    (
        "string in a numeric column",
        "predict_proba",
        json.dumps({"rows": [[1.0] * 5 + ["abc"] + [1.0] * 6]}).encode(),
        "application/json",
        400,
        ["non-numeric"],
    ),
    ("unknown method", "transform", b'{"rows": [[1]]}', "application/json", 404, ["transform"]),
    ("unknown content type", "predict", b"1,2,3", "text/csv", 415, ["Content-Type"]),
    ("npy with pickles", "predict", b"\x93NUMPY garbage", NPY, 400, [".npy"]),
    ("not an Arrow stream", "predict", b"garbage", ARROW, 400, ["Arrow"]),
    ("1-D npy", "predict", None, NPY, 400, ["2-D"]),
]


@pytest.mark.parametrize("case", BAD_REQUESTS, ids=[c[0] for c in BAD_REQUESTS])
def test_bad_requests_get_typed_errors_and_the_server_keeps_serving(case, xgb_model, xgb_server):
    name, route, body, ctype, status, words = case
    url, _ = xgb_server
    if body is None:
        body = _npy(np.ones(12))
    r = httpx.post(f"{url}/v1/{route}", content=body, headers={"Content-Type": ctype}, timeout=30)
    assert r.status_code == status, r.text
    doc = r.json()
    assert set(doc) == {"error", "type"}
    for word in words:
        assert word in doc["error"], doc
    _assert_still_scores(url, xgb_model[0])


ROUTING = [
    # (HTTP method, path, status, error type): the scoring route is answered ahead of
    # Starlette's router; everything else must still get Starlette's answers, as JSON
    ("GET", "/v1/predict", 405, "MethodNotAllowed"),
    ("POST", "/v1/", 404, "NotFound"),
    ("POST", "/v1/predict/extra", 404, "NotFound"),
    ("POST", "/v2/predict", 404, "NotFound"),
    ("POST", "/v1/model", 404, "NotFound"),  # a GET route, not a method of the model
]


@pytest.mark.parametrize("case", ROUTING, ids=[f"{c[0]} {c[1]}" for c in ROUTING])
def test_routes_around_the_scoring_route(case, xgb_model, xgb_server):
    verb, path, status, kind = case
    url, _ = xgb_server
    r = httpx.request(verb, f"{url}{path}", content=b'{"rows": [[1]]}', timeout=30)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json" and r.json()["type"] == kind
    ok = httpx.post(
        f"{url}/v1/predict", content=json.dumps({"rows": _json_rows(_rows(2, 5))}), timeout=30
    )  # no Content-Type at all: JSON
    assert ok.status_code == 200 and ok.headers["content-type"] == "application/json"
    assert ok.headers["content-length"] == str(len(ok.content))
    _assert_still_scores(url, xgb_model[0])


def test_oversized_body_is_refused_with_413(xgb_model, xgb_server):
    url, _ = xgb_server
    big = _npy(np.zeros((20000, N_FEATURES)))  # 1.9 MB > the fixture's 1 MiB limit
    r = httpx.post(f"{url}/v1/predict", content=big, headers={"Content-Type": NPY}, timeout=30)
    assert r.status_code == 413 and r.json()["type"] == "TooLarge"

    def chunks():  # no Content-Length: the limit is enforced while reading
        for _ in range(40):
            yield b"x" * 65536

    r = httpx.post(f"{url}/v1/predict", content=chunks(), headers={"Content-Type": NPY}, timeout=30)
    assert r.status_code == 413
    _assert_still_scores(url, xgb_model[0])


def test_unknown_and_missing_columns_are_named(pipeline_model, pipeline_server):
    model, _, df = pipeline_model
    url = pipeline_server
    r = _post_json(f"{url}/v1/predict", {"columns": {"color": ["red"], "x1": [1.0], "x3": [2.0]}})
    assert r.status_code == 400
    assert "x3" in r.json()["error"] and "x2" in r.json()["error"]
    r = _post_json(f"{url}/v1/predict", {"columns": {"color": ["red"], "x1": ["abc"], "x2": [2.0]}})
    assert r.status_code == 400 and "x1" in r.json()["error"]
    r = _post_json(
        f"{url}/v1/predict", {"columns": {"color": ["purple"], "x1": [1.0], "x2": [2.0]}}
    )
    assert r.status_code == 400 and "purple" in r.json()["error"]
    r = _post_json(
        f"{url}/v1/predict", {"columns": {"color": ["red", "blue"], "x1": [1.0], "x2": [2.0]}}
    )
    assert r.status_code == 400 and "x1" in r.json()["error"]
    part = df.iloc[:5]
    r = _post_json(f"{url}/v1/predict", {"columns": {c: part[c].tolist() for c in part}})
    assert r.status_code == 200 and r.json()["predictions"] == model.predict(part).tolist()


# -------------------------------------------------------------------------- concurrency --
def test_concurrent_requests_of_different_sizes_and_formats_get_exact_answers(
    xgb_model, xgb_server
):
    model, _ = xgb_model
    url, app = xgb_server
    calls_before = app.state.batcher.stats.model_calls
    requests_before = app.state.batcher.stats.requests
    rng = np.random.default_rng(5)
    jobs = []
    for i in range(120):
        n = int(rng.choice([1, 1, 1, 3, 17, 64, 300]))
        kind = ["json", "npy", "npy32", "arrow", "bad"][i % 5]
        jobs.append((i, n, kind, _rows(n, 1000 + i)))

    def send(job):
        i, n, kind, X = job
        with httpx.Client(timeout=60) as client:
            if kind == "json":
                r = client.post(f"{url}/v1/predict_proba", json={"rows": _json_rows(X)})
                return r.status_code, np.asarray(r.json()["predictions"])
            if kind == "bad":  # wrong width, stacked with nobody: a 400 for this one alone
                r = client.post(f"{url}/v1/predict_proba", json={"rows": _json_rows(X[:, :5])})
                return r.status_code, r.json()
            data = X.astype(np.float32) if kind == "npy32" else X
            if kind == "arrow":
                body = _arrow(pd.DataFrame(X, columns=[f"f{j}" for j in range(N_FEATURES)]))
                r = client.post(
                    f"{url}/v1/predict_proba", content=body, headers={"Content-Type": ARROW}
                )
                return r.status_code, pa.ipc.open_stream(
                    r.content
                ).read_all().to_pandas().to_numpy()
            r = client.post(
                f"{url}/v1/predict_proba", content=_npy(data), headers={"Content-Type": NPY}
            )
            return r.status_code, load_npy(r.content)

    with concurrent.futures.ThreadPoolExecutor(24) as pool:
        results = list(pool.map(send, jobs))
    for (_, n, kind, X), (status, out) in zip(jobs, results):
        if kind == "bad":
            assert status == 400 and "features" in out["error"], out
            continue
        assert status == 200, (kind, n, out)
        expected = model.predict_proba(X.astype(np.float32) if kind == "npy32" else X)
        np.testing.assert_allclose(out, expected, RTOL, ATOL, err_msg=f"{kind} {n} rows")
    stats = app.state.batcher.stats
    assert stats.requests - requests_before == 120
    assert stats.model_calls - calls_before < 120  # coalescing happened
    _assert_still_scores(url, model)


def test_a_bad_request_in_a_batch_fails_alone(pipeline_model, tmp_path):
    """Requests stacked into one call where one holds an unseen category: the batch is re-run
    request by request, so only the bad one gets a 400."""
    model, path, df = pipeline_model
    app = create_app(ServeConfig(path, max_delay_ms=200))
    part = df.iloc[:8]
    good = {"columns": {c: part[c].tolist() for c in part}}
    bad = {"columns": {"color": ["red"] * 7 + ["purple"], "x1": [1.0] * 8, "x2": [1.0] * 8}}
    with running_server(app) as url:
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            futs = [
                pool.submit(_post_json, f"{url}/v1/predict", bad if i == 7 else good)
                for i in range(16)
            ]
            results = [f.result() for f in futs]
    for i, r in enumerate(results):
        if i == 7:
            assert r.status_code == 400 and "purple" in r.json()["error"]
            assert "row 7" in r.json()["error"]  # the row within its own request
        else:
            assert r.status_code == 200 and r.json()["predictions"] == model.predict(part).tolist()
    assert app.state.batcher.stats.model_calls < 16 + 16


class _SlowModel:
    """A compiled model whose calls take a while (to fill the queue)."""

    def __init__(self, inner, seconds):
        self._inner, self._seconds = inner, seconds

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def __str__(self):
        return str(self._inner)

    def predict(self, X):
        import time

        time.sleep(self._seconds)
        return self._inner.predict(X)


def test_a_full_queue_answers_503_and_recovers(xgb_model):
    model, path = xgb_model
    slow = _SlowModel(peregrine.load(path), 0.2)
    app = create_app(ServeConfig(path, max_batch=4, max_queue_rows=8), model=slow)
    X = _rows(4, 7)
    with running_server(app) as url:
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            futs = [
                pool.submit(_post_json, f"{url}/v1/predict", {"rows": _json_rows(X)})
                for _ in range(12)
            ]
            results = [f.result() for f in futs]
        codes = sorted(r.status_code for r in results)
        assert 503 in codes and 200 in codes, codes
        for r in results:
            if r.status_code == 503:
                assert r.json()["type"] == "QueueFull" and r.headers["retry-after"] == "1"
            else:
                assert r.json()["predictions"] == model.predict(X).tolist()
        r = _post_json(f"{url}/v1/predict", {"rows": _json_rows(X)})
        assert r.status_code == 200
        assert 'peregrine_errors_total{kind="QueueFull"}' in httpx.get(f"{url}/metrics").text
