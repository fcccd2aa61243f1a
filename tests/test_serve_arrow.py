"""Arrow bodies of `peregrine serve`: the bulk path (a strided view of the body transposed in one
copy) gives exactly the array the column-by-column conversion gives, whatever the stream's
layout; and a body arriving in many messages reads back byte for byte, whether its length is
announced, wrong or absent."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("starlette")
xgb = pytest.importorskip("xgboost")

import peregrine  # noqa: E402
from peregrine.deploy import ServeConfig, create_app, formats  # noqa: E402

N_FEATURES = 6
NAMES = tuple(f"f{j}" for j in range(N_FEATURES))


def _stream(columns: dict, chunk: int | None = None) -> bytes:
    table = pa.table(columns)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=chunk)
    return sink.getvalue().to_pybytes()


def _reference(columns: dict, order) -> np.ndarray:
    """The column-by-column conversion (nulls as NaN), in ``order``."""
    return np.column_stack([pa.chunked_array([pa.array(columns[n])]).to_numpy() for n in order])


def _columns(rows: int, dtype, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, N_FEATURES)).astype(dtype)
    return {n: X[:, j] for j, n in enumerate(NAMES)}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("rows", [1, 7, 1000])
def test_one_batch_takes_the_strided_view(dtype, rows):
    cols = _columns(rows, dtype)
    body = _stream(cols)
    batch = pa.ipc.open_stream(body).read_next_batch()
    view = formats._column_matrix(batch.columns, np.frombuffer(body, np.uint8), np.dtype(dtype))
    assert view is not None  # the fast path is what this test exercises
    payload = formats.decode(body, formats.ARROW, NAMES)
    ref = _reference(cols, NAMES)
    assert payload.data.dtype == dtype and payload.data.flags.c_contiguous
    assert payload.data.tobytes() == ref.tobytes()  # bit for bit, row-major
    assert payload.key == ("array", np.dtype(dtype).str, N_FEATURES)


def test_other_layouts_give_the_same_rows():
    cols = _columns(1000, np.float64, 1)
    ref = _reference(cols, NAMES)
    # several record batches, the last one short
    assert formats.decode(_stream(cols, 300), formats.ARROW, NAMES).data.tobytes() == ref.tobytes()
    # the model's columns in another order: matched by name
    shuffled = {n: cols[n] for n in reversed(NAMES)}
    got = formats.decode(_stream(shuffled), formats.ARROW, NAMES).data
    assert got.tobytes() == ref.tobytes()
    # without feature names the stream's own order stands
    got = formats.decode(_stream(shuffled), formats.ARROW, None).data
    assert got.tobytes() == _reference(shuffled, tuple(reversed(NAMES))).tobytes()
    # nulls become NaN (the column-by-column path)
    nulls = dict(cols)
    nulls["f2"] = pa.array([None if i % 7 == 0 else float(i) for i in range(1000)])
    got = formats.decode(_stream(nulls), formats.ARROW, NAMES).data
    assert np.isnan(got[::7, 2]).all()
    np.testing.assert_array_equal(got, _reference(nulls, NAMES))


def test_a_view_outside_the_body_is_refused():
    """Buffers that do not lie inside the body at one spacing never become a view of it."""
    cols = _columns(50, np.float64, 2)
    body = _stream(cols)
    batch = pa.ipc.open_stream(body).read_next_batch()
    whole = np.frombuffer(body, np.uint8)
    f8 = np.dtype(np.float64)
    assert formats._column_matrix(batch.columns[::-1], whole, f8) is None  # descending
    uneven = [batch.column(0), batch.column(1), batch.column(3)]
    assert formats._column_matrix(uneven, whole, f8) is None
    # every other column is one spacing still: a view, and the right values
    every_other = formats._column_matrix([batch.column(0), batch.column(2)], whole, f8)
    np.testing.assert_array_equal(every_other, np.stack([cols["f0"], cols["f2"]]))
    other = np.frombuffer(_stream(cols), np.uint8)
    assert formats._column_matrix(batch.columns, other, f8) is None  # another buffer
    sliced = [c.slice(1) for c in batch.columns]
    assert formats._column_matrix(sliced, whole, f8) is None  # offsets


def test_arrow_answers_read_back_exactly():
    rng = np.random.default_rng(3)
    out = rng.random((500, 3)).astype(np.float32)
    table = pa.ipc.open_stream(formats.encode(out, formats.ARROW, ["a", "b", "c"])).read_all()
    assert table.column_names == ["a", "b", "c"]
    got = np.column_stack([c.to_numpy() for c in table.columns])
    assert got.dtype == np.float32 and got.tobytes() == out.tobytes()
    labels = np.array(["x", "y", "x"], dtype=object)
    table = pa.ipc.open_stream(formats.encode(labels, formats.ARROW)).read_all()
    assert table.column("predictions").to_pylist() == ["x", "y", "x"]


# ------------------------------------------------------------------- bodies in pieces --
@pytest.fixture(scope="module")
def app_and_model(tmp_path_factory):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, N_FEATURES))
    model = xgb.XGBClassifier(n_estimators=20, max_depth=4, random_state=0).fit(X, X[:, 0] > 0)
    path = tmp_path_factory.mktemp("serve") / "xgb.peregrine"
    peregrine.compile(model, backend="native").save(path)
    app = create_app(ServeConfig(str(path), max_body_bytes=1 << 20))
    return app, peregrine.load(str(path))


def _post(
    app, body: bytes, pieces: int, length: int | None, content_type: str = formats.ARROW
) -> tuple[int, bytes]:
    """The ASGI app called directly: ``body`` in ``pieces`` messages, with a Content-Length
    of ``length`` (None: none, as in a chunked request)."""
    headers = [(b"content-type", content_type.encode())]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    scope = {"type": "http", "method": "POST", "path": "/v1/predict_proba", "headers": headers}
    step = -(-len(body) // pieces)
    messages = [
        {"type": "http.request", "body": body[i : i + step], "more_body": i + step < len(body)}
        for i in range(0, len(body), step)
    ]
    sent: list[dict] = []

    async def receive():
        return messages.pop(0)

    async def send(message):
        sent.append(message)

    async def run():
        batcher = app.state.batcher
        await batcher.start()
        try:
            await app(scope, receive, send)
        finally:
            await batcher.stop()
            batcher._closing = False  # the next call starts it again

    asyncio.run(run())
    return sent[0]["status"], sent[1]["body"]


@pytest.mark.parametrize(
    "pieces, announced",
    [(1, "exact"), (9, "exact"), (9, None), (9, "short")],
)
def test_bodies_in_pieces_score_as_one(app_and_model, pieces, announced):
    app, compiled = app_and_model
    cols = _columns(3000, np.float64, 4)
    body = _stream(cols)
    length = {"exact": len(body), "short": len(body) - 1000, None: None}[announced]
    status, answer = _post(app, body, pieces, length)
    assert status == 200, answer
    table = pa.ipc.open_stream(answer).read_all()
    got = np.column_stack([c.to_numpy() for c in table.columns])
    expected = compiled.predict_proba(_reference(cols, NAMES))
    assert got.tobytes() == np.ascontiguousarray(expected).tobytes()


def test_a_body_over_the_limit_in_pieces_is_413(app_and_model):
    app, _ = app_and_model
    body = _stream(_columns(30_000, np.float64, 5))  # 1.4 MB > the 1 MiB limit
    assert len(body) > 1 << 20
    for length in (None, 1000):  # no length; a length that understates the body
        status, answer = _post(app, body, 40, length)
        assert status == 413 and b"TooLarge" in answer


def test_json_and_npy_bodies_in_pieces(app_and_model):
    """Every format reads the buffer a body in several messages lands in, including JSON
    that only the standard library parses (a NaN literal: json.loads takes no memoryview)."""
    import io
    import json

    app, compiled = app_and_model
    X = np.random.default_rng(6).normal(size=(2000, N_FEATURES))
    X[3, 1] = np.nan
    rows = [[v if v == v else None for v in row] for row in X.tolist()]
    strict = json.dumps({"rows": rows}).encode()
    literal = strict.replace(b"null", b"NaN", 1)  # only json.loads reads NaN
    expected = compiled.predict_proba(X)
    for body in (strict, literal):
        status, answer = _post(app, body, 7, len(body), formats.JSON)
        assert status == 200, answer
        np.testing.assert_array_equal(json.loads(answer)["predictions"], expected)
    buf = io.BytesIO()
    np.save(buf, X, allow_pickle=False)
    status, answer = _post(app, buf.getvalue(), 7, len(buf.getvalue()), formats.NPY)
    assert status == 200, answer
    assert formats.load_npy(answer).tobytes() == np.ascontiguousarray(expected).tobytes()
