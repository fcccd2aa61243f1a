"""Bodies read straight into the app's buffer (``protocol.RECEIVE_INTO``, the draining protocol
`peregrine serve` and ``running_server`` run): every byte arrives, in order, whatever the size
and however the client writes it (``Expect: 100-continue``, chunked bodies take the ASGI
messages instead); a client leaving mid-body is told to the app, and the server keeps serving;
bulk Arrow bodies through it answer exactly what the model answers in-process."""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
import time

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
pa = pytest.importorskip("pyarrow")
xgb = pytest.importorskip("xgboost")

import peregrine  # noqa: E402
from peregrine.deploy import ServeConfig, create_app  # noqa: E402
from peregrine.deploy.protocol import RECEIVE_INTO  # noqa: E402
from peregrine.deploy.testing import running_server  # noqa: E402


def _echo_app(seen: list):
    """Answers ``{"sha256", "size", "into"}`` of the body it read: through RECEIVE_INTO where
    the length is announced and the body comes in more than one message, else by messages.
    ``seen`` gets ("waiting",) as it calls receive_into and ("into", result) when that returns
    (None: the client left)."""

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        announced = dict(scope["headers"]).get(b"content-length")
        message = await receive()
        body, used = message.get("body", b""), False
        into = scope.get("extensions", {}).get(RECEIVE_INTO)
        if message.get("more_body") and announced is not None and into is not None:
            buf = memoryview(bytearray(int(announced)))
            buf[: len(body)] = body
            seen.append(("waiting",))
            size = await into(buf, len(body))
            seen.append(("into", size))
            if size is None:
                return
            body, used = bytes(buf[:size]), True
        else:
            while message.get("more_body"):
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                body += message.get("body", b"")
        answer = json.dumps(
            {"sha256": hashlib.sha256(body).hexdigest(), "size": len(body), "into": used}
        ).encode()
        head = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(answer))]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        await send({"type": "http.response.body", "body": answer})

    return app


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


@pytest.mark.parametrize("loop", ["auto", "asyncio"])  # uvloop, and asyncio's own loop
def test_bodies_of_every_size_arrive_whole(loop):
    """Both loops read a body's rest into the buffer through the protocol swapped in for it
    (``protocol._BodyReader``), and take the connection's next request after it."""
    seen: list = []
    rng = np.random.default_rng(0)
    with running_server(_echo_app(seen), loop=loop) as url:
        with httpx.Client(timeout=30) as client:
            for size in (0, 1, 65_535, 65_537, 300_000, 3_000_001):
                body = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
                doc = client.post(f"{url}/", content=body).json()
                assert doc["size"] == size and doc["sha256"] == hashlib.sha256(body).hexdigest()
                if size > 1 << 20:
                    assert doc["into"]  # several messages: read into the buffer
            # a chunked body (no length announced) takes the messages, as ASGI has them
            body = rng.integers(0, 256, 500_000, dtype=np.uint8).tobytes()
            pieces = (body[i : i + 70_000] for i in range(0, len(body), 70_000))
            doc = client.post(f"{url}/", content=pieces).json()
            assert doc == {
                "sha256": hashlib.sha256(body).hexdigest(),
                "size": len(body),
                "into": False,
            }


def test_expect_continue_and_a_body_written_slowly():
    """The app's first receive() answers ``100 Continue``; the rest, written in pieces with
    pauses, lands in the buffer in order."""
    seen: list = []
    body = np.random.default_rng(1).integers(0, 256, 1_500_000, dtype=np.uint8).tobytes()
    with running_server(_echo_app(seen)) as url:
        with socket.create_connection(("127.0.0.1", _port(url)), timeout=30) as conn:
            conn.sendall(
                b"POST / HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body)
            )
            assert conn.recv(64).startswith(b"HTTP/1.1 100 Continue")
            for i in range(0, len(body), 200_000):
                conn.sendall(body[i : i + 200_000])
                time.sleep(0.02)
            reader = conn.makefile("rb")
            answer = http.client.HTTPResponse(conn)
            answer.fp = reader
            answer.begin()
            doc = json.loads(answer.read())
    assert doc == {"sha256": hashlib.sha256(body).hexdigest(), "size": len(body), "into": True}


def test_a_client_leaving_mid_body_is_told_and_the_server_keeps_serving():
    seen: list = []
    with running_server(_echo_app(seen)) as url:
        with socket.create_connection(("127.0.0.1", _port(url)), timeout=30) as conn:
            conn.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 2000000\r\n\r\n")
            conn.sendall(b"x" * 300_000)
            deadline = time.monotonic() + 20
            while not seen and time.monotonic() < deadline:
                time.sleep(0.01)
            assert seen == [("waiting",)]  # the app is in receive_into, 1.7 MB to go
        deadline = time.monotonic() + 20
        while len(seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen == [("waiting",), ("into", None)]  # told that the client left
        doc = httpx.post(f"{url}/", content=b"y" * 100_000, timeout=30).json()
        assert doc["size"] == 100_000


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 12))
    model = xgb.XGBClassifier(n_estimators=30, max_depth=5, random_state=0).fit(X, X[:, 0] > 0)
    path = tmp_path_factory.mktemp("serve") / "xgb.peregrine"
    peregrine.compile(model, backend="native").save(path)
    app = create_app(ServeConfig(str(path), max_batch=1024))
    with running_server(app) as url:
        yield url, model, peregrine.load(str(path)), app


def test_bulk_arrow_bodies_answer_exactly_several_at_once(served):
    """Bodies of max_batch rows or more queue for the model thread while it is busy (the
    batcher's pipelined hand-off); each gets its own rows' answers, in its own order."""
    import concurrent.futures

    url, model, compiled, app = served
    rng = np.random.default_rng(2)
    blocks = [rng.normal(size=(rows, 12)) for rows in (10_000, 1024, 5_000, 20_000, 3, 10_000)]
    blocks[0][5, 3] = np.nan
    blocks[3][7, 0] = np.inf
    bodies = []
    for X in blocks:
        table = pa.table({f"f{j}": X[:, j] for j in range(12)})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        bodies.append(sink.getvalue().to_pybytes())
    calls = app.state.batcher.stats.model_calls

    def post(body: bytes) -> np.ndarray:
        r = httpx.post(
            f"{url}/v1/predict_proba",
            content=body,
            headers={"Content-Type": "application/vnd.apache.arrow.stream"},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        table = pa.ipc.open_stream(r.content).read_all()
        return np.column_stack([c.to_numpy() for c in table.columns])

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(post, bodies * 2))
    for X, got in zip(blocks * 2, answers):
        assert got.tobytes() == np.ascontiguousarray(compiled.predict_proba(X)).tobytes()
        np.testing.assert_allclose(got, model.predict_proba(X), rtol=1e-5, atol=1e-6)
    assert app.state.batcher.stats.model_calls > calls
