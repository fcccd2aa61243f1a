"""SIGTERM under keep-alive load: no request the server accepted is lost.

Clients on raw sockets (so every outcome is seen, not a client library's retry) send single-row
requests back to back on keep-alive connections while the server gets SIGTERM. Every request
must end one of these ways:

- a complete 200 answer (exact scores); one carrying ``Connection: close`` ends the connection
  and the client reconnects;
- the connection was refused (the server had stopped listening): never sent;
- the server had closed the connection before the request was written (the client sees the end
  of the stream before sending): never sent.

Anything else (the request written, then the connection reset or ended before a complete
answer) is a lost request, and the test fails on any, with one exception HTTP/1.1 itself
leaves open: a connection that ends before *any byte* of the answer, just as the server closes
it (an idle keep-alive connection closed as the request crosses it, or a connection made in the
instant between the last accept and the listening socket's close). The server never read such
a request (RFC 9112 section 9.3.1 lets a client retry it), so the client retries it once on a
new connection, as HTTP clients do, and the test bounds how often that happens: before the fix
5-7 keep-alive and 7-9 new-connection requests per SIGTERM ended this way, after it 0-1 (one
such reset failed a CI run at a forced CPU level when the test asserted none).
"""

from __future__ import annotations

import json
import re
import select
import signal
import socket
import threading
import time

import numpy as np
import pytest

pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
xgb = pytest.importorskip("xgboost")

import peregrine  # noqa: E402
from tests.test_serve_process import Server  # noqa: E402

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 6))
    y = (X[:, 0] - X[:, 2] > 0).astype(int)
    model = xgb.XGBClassifier(n_estimators=40, max_depth=5, random_state=0).fit(X, y)
    path = tmp_path_factory.mktemp("serve_shutdown") / "m.peregrine"
    peregrine.compile(model, backend="native").save(path)
    return model, str(path)


def _closed_by_peer(sock: socket.socket) -> bool:
    """The server ended this connection before we wrote on it (EOF or reset waiting)."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class _NoAnswer(ConnectionError):
    """The connection ended (EOF or reset) before any byte of the answer."""


def _read_answer(sock: socket.socket) -> tuple[int, bytes, bool]:
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            chunk = sock.recv(65536)
        except OSError as exc:
            if not data:
                raise _NoAnswer(repr(exc)) from exc
            raise
        if not chunk:
            if not data:
                raise _NoAnswer("closed before any byte of the answer")
            raise ConnectionError("closed in the middle of the response head")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    status = int(head.split()[1])
    length = int(re.search(rb"(?i)\r\ncontent-length: *(\d+)", head).group(1))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed in the middle of the response body")
        body += chunk
    close = re.search(rb"(?i)\r\nconnection: *close", head) is not None
    return status, body, close


class _Client(threading.Thread):
    """Back-to-back requests on one keep-alive connection at a time, until refused."""

    def __init__(
        self, host: str, port: int, X: np.ndarray, expected: np.ndarray, start: int, fresh: bool
    ):
        super().__init__(daemon=True)
        self.fresh = fresh  # one request per connection: new connections race the shutdown
        self.host, self.port, self.X, self.expected = host, port, X, expected
        self.i = start
        self.counts = {"ok": 0, "refused": 0, "closed_before_send": 0, "reconnects": 0,
                       "retried": 0}
        self.retry: int | None = None  # a row to send again on a new connection
        self.lost: list[str] = []
        self.wrong: list[int] = []
        self.deadline = time.monotonic() + 60

    def _request(self, row: int) -> bytes:
        body = json.dumps({"rows": [self.X[row].tolist()]}).encode()
        return (
            b"POST /v1/predict_proba HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )

    def run(self) -> None:
        sock = None
        while time.monotonic() < self.deadline:
            if sock is None:
                try:
                    sock = socket.create_connection((self.host, self.port), timeout=30)
                except ConnectionRefusedError:
                    self.counts["refused"] += 1
                    return  # the server stopped listening: done
                self.counts["reconnects"] += 1
            elif _closed_by_peer(sock):
                self.counts["closed_before_send"] += 1
                sock.close()
                sock = None
                continue
            is_retry = self.retry is not None
            if is_retry:
                row, self.retry = self.retry, None
            else:
                row = self.i % len(self.X)
                self.i += 1
            try:
                sock.sendall(self._request(row))
            except OSError:
                # the server reset the connection before this request was written: not sent
                self.counts["closed_before_send"] += 1
                sock.close()
                sock = None
                continue
            try:
                status, body, close = _read_answer(sock)
            except _NoAnswer as exc:
                if is_retry:
                    self.lost.append(f"row {row}, retried: {exc}")  # twice: lost
                else:
                    self.counts["retried"] += 1
                    self.retry = row
                sock.close()
                sock = None
                continue
            except (OSError, ConnectionError) as exc:
                self.lost.append(f"row {row}: {exc!r}")
                sock.close()
                sock = None
                continue
            if status != 200:
                self.lost.append(f"row {row}: status {status} {body[:200]!r}")
            else:
                got = np.asarray(json.loads(body)["predictions"])
                if not np.allclose(got, self.expected[row : row + 1], rtol=1e-5, atol=1e-6):
                    self.wrong.append(row)
                self.counts["ok"] += 1
            if close or self.fresh:
                sock.close()
                sock = None
        if sock is not None:
            sock.close()


def _sigterm_under_load(
    path: str, model, *server_args: str, clients: int = 24, fresh: int = 4, seconds: float = 1.0
) -> dict:
    X = np.random.default_rng(7).normal(size=(256, 6))
    expected = model.predict_proba(X)
    server = Server(path, "--log-level", "warning", *server_args)
    try:
        threads = [
            _Client(server.host, server.port, X, expected, 17 * k, fresh=k < fresh)
            for k in range(clients)
        ]
        for t in threads:
            t.start()
        time.sleep(seconds)
        server.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(90)
        code = server.proc.wait(60)
    finally:
        server.stop()
    total: dict = {"exit": code, "lost": [], "wrong": []}
    for t in threads:
        for k, v in t.counts.items():
            total[k] = total.get(k, 0) + v
        total["lost"] += t.lost
        total["wrong"] += t.wrong
    return total


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_under_keep_alive_load_loses_no_accepted_request(artifact, workers):
    """Before the fix, per SIGTERM: 5-7 requests lost on keep-alive connections (uvicorn closed
    idle connections holding a request just written), 7-9 on new connections (the listen
    backlog reset), and with --workers 2 one per client (the supervisor held the socket open
    during the workers' shutdown, so every reconnect waited in a backlog nobody accepted)."""
    model, path = artifact
    args = ("--workers", str(workers)) if workers > 1 else ()
    for _ in range(2 if workers == 1 else 1):  # a race: SIGTERM at different moments
        total = _sigterm_under_load(path, model, *args, clients=32, fresh=8)
        assert total["lost"] == [], total
        # connections ended before any byte of an answer, as the server closed them: retried
        # (see the module docstring); before the fix 12-16 per SIGTERM
        assert total["retried"] <= 3, total
        assert total["wrong"] == [], total
        assert total["ok"] > 0 and total["refused"] > 0, total
        assert total["exit"] in (0, -signal.SIGTERM), total


async def _hello(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    await receive()
    head = [(b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 200, "headers": head})
    await send({"type": "http.response.body", "body": b"hi"})


def test_a_request_on_an_idle_keep_alive_connection_after_shutdown_is_answered(monkeypatch):
    """Deterministic: uvicorn closed these connections at once, losing the request written
    next; drained, a request gets its answer with Connection: close, then the close; part of
    a request's head restarts the idle window; a connection left idle closes after it."""
    import uvicorn

    from peregrine.deploy import protocol
    from peregrine.deploy.shutdown import DrainingServer

    window = 2.0  # wide margins for a loaded machine (the default is 0.5 s)
    monkeypatch.setattr(protocol, "DRAIN_IDLE_SECONDS", window)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = uvicorn.Config(_hello, http=protocol.draining_protocol(), log_level="warning")
    server = DrainingServer(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    request = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"
    idle = socket.create_connection(("127.0.0.1", port), timeout=10)  # never sends
    slow = socket.create_connection(("127.0.0.1", port), timeout=10)  # sends its head in two
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        for c in (conn, slow):
            c.sendall(request)
            assert _read_answer(c) == (200, b"hi", False)  # keep-alive
        server.should_exit = True  # what SIGTERM does
        t0 = time.monotonic()
        time.sleep(0.3)  # uvicorn is shutting down; the connections are idle, not closed
        assert not _closed_by_peer(conn) and not _closed_by_peer(slow)
        conn.sendall(request)
        assert _read_answer(conn) == (200, b"hi", True)  # answered, then Connection: close
        assert conn.recv(1) == b""
    time.sleep(max(0.0, t0 + window - 0.5 - time.monotonic()))
    slow.sendall(request[:10])  # within the first window
    time.sleep(max(0.0, t0 + window + 0.5 - time.monotonic()))  # past the first window
    assert not _closed_by_peer(slow)
    slow.sendall(request[10:])
    assert _read_answer(slow) == (200, b"hi", True)
    slow.close()
    assert idle.recv(1) == b""  # an idle connection is closed once it stayed idle that long
    assert time.monotonic() - t0 < window + 10
    idle.close()
    with pytest.raises(OSError):  # the listener closed when the shutdown began
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    thread.join(30)
    assert not thread.is_alive()


# --------------------------------------------------------- answer head and body in one write --
class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


class _Cycle:
    response_started = False


def test_the_answer_head_waits_for_the_body_and_goes_out_with_it():
    from peregrine.deploy.protocol import _HeadWithBody

    transport, cycle = _Transport(), _Cycle()
    out = _HeadWithBody(transport, cycle)
    out.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # before the answer started: at once
    assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    cycle.response_started = True
    out.write(b"HEAD\r\n\r\n")
    assert len(transport.writes) == 1  # held
    out.write(b"body")
    assert transport.writes[1:] == [b"HEAD\r\n\r\nbody"]  # one write
    out.write(b"more")
    assert transport.writes[2:] == [b"more"] and not out.is_closing()
    # an answer that started and then failed: the head is written before the close
    transport, cycle = _Transport(), _Cycle()
    out = _HeadWithBody(transport, cycle)
    cycle.response_started = True
    out.write(b"HEAD\r\n\r\n")
    out.close()
    assert transport.writes == [b"HEAD\r\n\r\n"] and transport.closed


def _read_http_answer(reader, has_body: bool = True) -> tuple[bytes, bytes]:
    """One HTTP answer with a Content-Length (the body's, even where none follows: HEAD) from
    the connection's buffered reader: (head, body)."""
    lines = []
    while True:
        line = reader.readline()
        assert line, f"connection ended after {lines!r}"
        if line == b"\r\n":
            break
        lines.append(line)
    head = b"".join(lines)
    length = int(re.search(rb"(?im)^content-length: *(\d+)", head).group(1)) if has_body else 0
    return head, reader.read(length)


def test_head_expect_continue_and_plain_answers_on_one_connection(artifact):
    """The server's protocol writes an answer's head with its body: HEAD answers (no body
    write), ``Expect: 100-continue`` (a write before the answer), plain and pipelined answers
    all arrive whole, in order, on one keep-alive connection."""
    model, path = artifact
    server = Server(path)
    X = np.random.default_rng(3).normal(size=(2, 6))
    body = json.dumps({"rows": X.tolist()}).encode()
    post = (
        b"POST /v1/predict_proba HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n" % len(body)
    )
    try:
        with socket.create_connection((server.host, server.port), timeout=10) as sock:
            reader = sock.makefile("rb")
            sock.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            head, rest = _read_http_answer(reader, has_body=False)
            assert head.startswith(b"HTTP/1.1 200") and rest == b""
            sock.sendall(post + b"Expect: 100-continue\r\n\r\n")
            assert reader.readline().startswith(b"HTTP/1.1 100") and reader.readline() == b"\r\n"
            sock.sendall(body)
            for _ in range(2):
                head, rest = _read_http_answer(reader)
                assert head.startswith(b"HTTP/1.1 200"), head
                np.testing.assert_allclose(
                    json.loads(rest)["predictions"], model.predict_proba(X), 1e-5, 1e-6
                )
                sock.sendall(post + b"\r\n" + body)
            sock.sendall(b"GET /v1/nope HTTP/1.1\r\nHost: t\r\n\r\n")  # pipelined
            head, rest = _read_http_answer(reader)
            assert head.startswith(b"HTTP/1.1 200")
            head, rest = _read_http_answer(reader)
            assert head.startswith(b"HTTP/1.1 405") and json.loads(rest)["type"]
    finally:
        server.stop()
