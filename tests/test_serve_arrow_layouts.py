"""Arrow bodies and answers of a layout seen before (``deploy/arrow_layouts.py``) and bodies read
from the socket straight into the app's buffer (``protocol._BodyReader``): the answers are bit
for bit the in-process model's and the bytes pyarrow's writer writes; any body that differs from
a remembered one outside its values (names, column count, dtype, a null, its length) takes
pyarrow's path and its validation (typed 400 errors); requests written back to back after a
body read that way are parsed and answered."""

from __future__ import annotations

import socket

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
pa = pytest.importorskip("pyarrow")
pytest.importorskip("uvicorn")
xgb = pytest.importorskip("xgboost")

import peregrine  # noqa: E402
from peregrine.deploy import ServeConfig, arrow_layouts, create_app, formats  # noqa: E402
from peregrine.deploy.testing import running_server  # noqa: E402

N_FEATURES = 5
NAMES = tuple(f"f{j}" for j in range(N_FEATURES))
ARROW = {"Content-Type": formats.ARROW}


def _stream(columns: dict) -> bytes:
    table = pa.table(columns)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _columns(X: np.ndarray, names=NAMES) -> dict:
    return {n: X[:, j] for j, n in enumerate(names)}


def _rows(seed: int, rows: int = 2000, dtype=np.float64) -> np.ndarray:
    X = np.random.default_rng(seed).normal(size=(rows, N_FEATURES)).astype(dtype)
    X[seed % rows, seed % N_FEATURES] = np.nan  # a NaN value (not a null): XGBoost's missing
    return X


# ------------------------------------------------------------------------------ decoding --
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("rows", [1, 7, 2000])
def test_a_known_layout_reads_every_body_of_it_exactly(dtype, rows):
    first = _stream(_columns(_rows(0, rows, dtype)))
    formats.decode(first, formats.ARROW, NAMES)  # pyarrow's path: the layout is remembered
    for seed in (1, 2, 3):
        X = _rows(seed, rows, dtype)
        body = _stream(_columns(X))
        known = arrow_layouts.known_rows(np.frombuffer(body, np.uint8), NAMES)
        assert known is not None  # the path this test is about
        payload = formats.decode(body, formats.ARROW, NAMES)
        assert payload.data.dtype == dtype and payload.data.flags.c_contiguous
        assert payload.data.tobytes() == X.tobytes()
        assert payload.key == ("array", np.dtype(dtype).str, N_FEATURES)


def test_bodies_differing_outside_their_values_are_not_taken_for_a_known_one():
    X = _rows(4)
    body = _stream(_columns(X))
    formats.decode(body, formats.ARROW, NAMES)
    whole = np.frombuffer(body, np.uint8)
    layout = arrow_layouts.known_rows(whole, NAMES)
    assert layout is not None
    # a column renamed (same length): its metadata differs
    renamed = _stream(_columns(X, ("f0", "f1", "f2", "f3", "g4")))
    assert len(renamed) == len(body)
    assert arrow_layouts.known_rows(np.frombuffer(renamed, np.uint8), NAMES) is None
    # one byte of the end-of-stream marker, or one byte more
    changed = bytearray(body)
    changed[-1] ^= 1
    assert arrow_layouts.known_rows(np.frombuffer(changed, np.uint8), NAMES) is None
    longer = np.frombuffer(body + b"\0" * 8, np.uint8)
    assert arrow_layouts.known_rows(longer, NAMES) is None
    # the same body read for a model without feature names: a layout of its own
    assert arrow_layouts.known_rows(whole, None) is None


def test_padding_between_columns_is_part_of_the_layout():
    X = _rows(5, 7, np.float32)  # 7 float32 values: 28 bytes, padded to 32
    body = _stream(_columns(X))
    formats.decode(body, formats.ARROW, NAMES)
    whole = np.frombuffer(body, np.uint8)
    assert arrow_layouts.known_rows(whole, NAMES) is not None
    padded = bytearray(body)
    start = body.index(X[:, 0].tobytes())
    padded[start + 28] ^= 0xFF  # the padding after the first column
    assert arrow_layouts.known_rows(np.frombuffer(padded, np.uint8), NAMES) is None


# ------------------------------------------------------------------------------ answers --
@pytest.mark.parametrize(
    "out, names",
    [
        (np.random.default_rng(0).random((1000, 2)).astype(np.float32), ["0", "1"]),
        (np.random.default_rng(1).random((7, 3)), ["a", "b", "c"]),
        (np.random.default_rng(2).random(9).astype(np.float32), None),
        (np.arange(11, dtype=np.int64), None),
    ],
)
def test_known_answers_are_the_bytes_pyarrow_writes(out, names):
    def pyarrow_writes(values: np.ndarray) -> bytes:
        cols = [values] if values.ndim == 1 else list(np.ascontiguousarray(values.T))
        batch = pa.RecordBatch.from_arrays(
            [pa.array(c) for c in cols], names=names or ["predictions"]
        )
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        return sink.getvalue().to_pybytes()

    assert formats.encode(out, formats.ARROW, names) == pyarrow_writes(out)
    key_names = names or ["predictions"]
    for seed in (3, 4):
        again = np.random.default_rng(seed).permutation(out.ravel()).reshape(out.shape)
        if again.dtype.kind == "f":
            again.flat[seed] = np.nan
        assert arrow_layouts.known_answer(again, key_names) is not None
        assert formats.encode(again, formats.ARROW, names) == pyarrow_writes(again)


def test_large_answers_are_not_kept():
    out = np.random.default_rng(5).random((70_000, 2)).astype(np.float32)  # 560 KB
    big = np.random.default_rng(6).random((140_000, 2))  # 2.2 MB of float64
    for values in (out, big):
        formats.encode(values, formats.ARROW, ["0", "1"])
    assert arrow_layouts.known_answer(out, ["0", "1"]) is not None
    assert arrow_layouts.known_answer(big, ["0", "1"]) is None
    table = pa.ipc.open_stream(formats.encode(big, formats.ARROW, ["0", "1"])).read_all()
    assert np.column_stack([c.to_numpy() for c in table.columns]).tobytes() == big.tobytes()


def test_labels_and_booleans_take_pyarrow():
    labels = np.array(["x", "y", "x"], dtype=object)
    assert arrow_layouts.known_answer(labels, ["predictions"]) is None
    formats.encode(labels, formats.ARROW)
    assert arrow_layouts.known_answer(labels, ["predictions"]) is None
    flags = np.array([True, False, True])
    formats.encode(flags, formats.ARROW)
    assert arrow_layouts.known_answer(flags, ["predictions"]) is None
    table = pa.ipc.open_stream(formats.encode(flags, formats.ARROW)).read_all()
    assert table.column("predictions").to_pylist() == [True, False, True]


# ---------------------------------------------------------------------- through a server --
@pytest.fixture(scope="module")
def served(tmp_path_factory):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1000, N_FEATURES))
    model = xgb.XGBClassifier(n_estimators=20, max_depth=4, random_state=0)
    model.fit(X, X[:, 0] + X[:, 3] > 0)
    path = tmp_path_factory.mktemp("serve") / "xgb.peregrine"
    peregrine.compile(model, backend="native").save(path)
    compiled = peregrine.load(str(path))
    assert compiled.feature_names_in_ is None  # XGBoost fitted on an array: f0..f4
    with running_server(create_app(ServeConfig(str(path)))) as url:
        yield url, compiled


def _answer(r) -> np.ndarray:
    assert r.status_code == 200, r.text
    table = pa.ipc.open_stream(r.content).read_all()
    return np.column_stack([c.to_numpy() for c in table.columns])


def test_bulk_bodies_through_the_server_answer_bit_for_bit(served):
    url, compiled = served
    with httpx.Client(timeout=60) as client:
        post = lambda body: client.post(f"{url}/v1/predict_proba", content=body, headers=ARROW)  # noqa: E731
        for seed in range(4):  # the first body learns the layout, the others use it
            for dtype in (np.float64, np.float32):
                X = _rows(seed, 20_000, dtype)
                got = _answer(post(_stream(_columns(X))))
                expected = compiled.predict_proba(X)
                assert got.tobytes() == np.ascontiguousarray(expected).tobytes()
        X = _rows(7, 20_000)
        # a null in a column (pyarrow's path): NaN, XGBoost's missing value
        cols = _columns(X)
        cols["f2"] = pa.array([None if i % 5 == 0 else v for i, v in enumerate(X[:, 2])])
        Xn = X.copy()
        Xn[::5, 2] = np.nan
        got = _answer(post(_stream(cols)))
        assert got.tobytes() == np.ascontiguousarray(compiled.predict_proba(Xn)).tobytes()
        # columns in another order are the stream's order for a model without names
        shuffled = {n: X[:, j] for j, n in reversed(list(enumerate(NAMES)))}
        got = _answer(post(_stream(shuffled)))
        expected = compiled.predict_proba(np.ascontiguousarray(X[:, ::-1]))
        assert got.tobytes() == np.ascontiguousarray(expected).tobytes()
        # a column short: the model's typed error, every time
        for _ in range(2):
            r = post(_stream(_columns(X[:, :4], NAMES[:4])))
            assert r.status_code == 400 and r.json()["type"] == "InputError", r.text
            assert "4 features" in r.json()["error"]


def test_requests_written_back_to_back_after_a_body_are_answered(served):
    """Two bulk requests and a JSON one in one write: each body is read straight into its
    buffer, never past its end; the parser starts afresh on the next request."""
    url, compiled = served
    port = int(url.rsplit(":", 1)[1])
    blocks = [_rows(8, 30_000), _rows(9, 20_000)]
    wire = b""
    for X in blocks:
        body = _stream(_columns(X))
        wire += (
            b"POST /v1/predict_proba HTTP/1.1\r\nHost: t\r\n"
            b"Content-Type: %s\r\nContent-Length: %d\r\n\r\n" % (formats.ARROW.encode(), len(body))
        ) + body
    row = b'{"rows": [[0.5, -1.0, 2.0, 0.0, 1.0]]}'
    wire += (
        b"POST /v1/predict HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(row)
    ) + row
    with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
        conn.sendall(wire)
        received = b""
        while chunk := conn.recv(1 << 16):
            received += chunk
    answers = []
    while received:
        head, _, rest = received.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        length = int(
            next(
                line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
            ).split(b":")[1]
        )
        answers.append(rest[:length])
        received = rest[length:]
    assert len(answers) == 3
    for X, answer in zip(blocks, answers):
        table = pa.ipc.open_stream(answer).read_all()
        got = np.column_stack([c.to_numpy() for c in table.columns])
        assert got.tobytes() == np.ascontiguousarray(compiled.predict_proba(X)).tobytes()
    expected = compiled.predict(np.array([[0.5, -1.0, 2.0, 0.0, 1.0]]))
    assert httpx.Response(200, content=answers[2]).json()["predictions"] == expected.tolist()
