"""`peregrine serve` as a process, as users run it: client disconnects, SIGTERM with requests
in flight, refusing non-loopback addresses without --allow-remote."""

from __future__ import annotations

import concurrent.futures
import io
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
xgb = pytest.importorskip("xgboost")

import peregrine  # noqa: E402
from peregrine.cli import main  # noqa: E402
from peregrine.deploy.formats import load_npy  # noqa: E402

pytestmark = pytest.mark.timeout(120)
NPY = "application/x-npy"


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 8))
    y = (X[:, 0] + X[:, 1] ** 2 > 0.5).astype(int)
    model = xgb.XGBClassifier(n_estimators=60, max_depth=6, random_state=0).fit(X, y)
    path = tmp_path_factory.mktemp("serve_process") / "m.peregrine"
    peregrine.compile(model, backend="native").save(path)
    return model, str(path)


class Server:
    def __init__(self, path: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "peregrine.cli", "serve", path, "--port", "0", *args],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        deadline = time.monotonic() + 60
        self.url = None
        for line in self.proc.stderr:
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                self.url = m.group(1)
                break
            if time.monotonic() > deadline:
                break
        assert self.url, "the server did not announce its address"
        self.host, self.port = self.url[len("http://") :].rsplit(":", 1)
        self.port = int(self.port)
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.05)
        raise AssertionError("the server did not become healthy")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stderr.close()


def _npy(X: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, X, allow_pickle=False)
    return buf.getvalue()


def _request_head(path: str, length: int, ctype: str = NPY) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def _read_response(sock: socket.socket) -> tuple[int, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the response head")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    status = int(head.split()[1])
    length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, body


def _check_scores(url: str, model) -> None:
    X = np.random.default_rng(3).normal(size=(5, 8))
    r = httpx.post(f"{url}/v1/predict_proba", json={"rows": X.tolist()}, timeout=30)
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json()["predictions"], model.predict_proba(X), 1e-5, 1e-6)


def test_client_disconnects_do_not_hurt_the_server(artifact):
    model, path = artifact
    server = Server(path)
    try:
        X = np.random.default_rng(1).normal(size=(50000, 8))
        body = _npy(X)
        # 1. gone in the middle of the body
        with socket.create_connection((server.host, server.port)) as s:
            s.sendall(_request_head("/v1/predict", len(body)) + body[: len(body) // 3])
        # 2. gone after sending the whole body, before the answer
        with socket.create_connection((server.host, server.port)) as s:
            s.sendall(_request_head("/v1/predict_proba", len(body)) + body)
        # 3. gone after the headers, before any body
        with socket.create_connection((server.host, server.port)) as s:
            s.sendall(_request_head("/v1/predict", 1000))
        time.sleep(0.3)
        assert server.proc.poll() is None
        _check_scores(server.url, model)
        r = httpx.post(
            f"{server.url}/v1/predict", content=body, headers={"Content-Type": NPY}, timeout=30
        )
        out = load_npy(r.content)
        np.testing.assert_array_equal(out, model.predict(X))
    finally:
        server.stop()


def test_sigterm_answers_every_accepted_request_then_exits(artifact):
    model, path = artifact
    server = Server(path)
    X = np.random.default_rng(2).normal(size=(20000, 8))
    body = _npy(X)
    try:
        # a request accepted before SIGTERM whose body is still arriving after it
        slow = socket.create_connection((server.host, server.port))
        slow.sendall(_request_head("/v1/predict_proba", len(body)) + body[:1000])
        # and a few ordinary ones in flight
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            futs = [
                pool.submit(
                    httpx.post,
                    f"{server.url}/v1/predict",
                    content=body,
                    headers={"Content-Type": NPY},
                    timeout=60,
                )
                for _ in range(4)
            ]
            time.sleep(0.3)
            server.proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            assert server.proc.poll() is None  # still finishing what it accepted
            slow.sendall(body[1000:])
            status, answer = _read_response(slow)
            slow.close()
            results = [f.result() for f in futs]
        assert status == 200
        np.testing.assert_allclose(
            load_npy(answer), model.predict_proba(X), 1e-5, 1e-6
        )
        for r in results:
            assert r.status_code == 200
            np.testing.assert_array_equal(load_npy(r.content), model.predict(X))
        # uvicorn re-raises the signal once it has shut down cleanly (the parent sees how it
        # ended); older uvicorn versions exit 0
        assert server.proc.wait(30) in (0, -signal.SIGTERM)
        with pytest.raises(OSError):  # no longer accepting
            socket.create_connection((server.host, server.port), timeout=2).close()
    finally:
        server.stop()


def test_non_loopback_hosts_need_allow_remote(artifact, capsys):
    _, path = artifact
    assert main(["serve", path, "--host", "0.0.0.0", "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert "--allow-remote" in err and "0.0.0.0" in err


def test_serve_help_and_bad_artifact(tmp_path, capsys):
    assert main(["serve", "--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("--max-batch", "--max-delay-ms", "--workers", "--allow-remote"):
        assert flag in out
    bad = tmp_path / "bad.peregrine"
    bad.write_bytes(b"not a zip")
    assert main(["serve", str(bad), "--port", "0"]) == 1
    assert "bad.peregrine" in capsys.readouterr().err
    assert main(["serve", str(tmp_path / "missing.peregrine")]) == 1


def _metric_total(text: str, name: str) -> float:
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="uvicorn workers need fork/spawn on POSIX")
def test_two_workers_both_answer_and_metrics_count_both(artifact):
    model, path = artifact

    def metrics_dirs() -> set[str]:
        return {d for d in os.listdir(tempfile.gettempdir()) if d.startswith("peregrine-metrics-")}

    before = metrics_dirs()
    server = Server(path, "--workers", "2")
    try:
        X = np.random.default_rng(5).normal(size=(1, 8))
        scored: dict[int, int] = {}  # worker pid -> scoring requests it answered
        for _ in range(200):
            with httpx.Client(timeout=30) as client:  # new connection: any worker may take it
                pid = client.get(f"{server.url}/v1/model").json()["pid"]
                r = client.post(f"{server.url}/v1/predict", json={"rows": X.tolist()})
                assert r.status_code == 200  # same keep-alive connection: the same worker
                scored[pid] = scored.get(pid, 0) + 1
            if len(scored) == 2 and min(scored.values()) >= 3:
                break
        _check_scores(server.url, model)
        assert len(scored) == 2, f"one worker took every connection: {scored}"
        total = sum(scored.values()) + 1  # and _check_scores's request
        for _ in range(6):  # scrapes answered by either worker: each sees both
            with httpx.Client(timeout=30) as client:
                text = client.get(f"{server.url}/metrics").text
            assert _metric_total(text, "peregrine_requests_total") == total
            assert _metric_total(text, "peregrine_model_calls_total") == total
            assert _metric_total(text, "peregrine_request_duration_seconds_count") == total
            info_pids = set(re.findall(r'^peregrine_process_info\{[^}]*pid="(\d+)"', text, re.M))
            assert info_pids == {str(p) for p in scored}
    finally:
        server.stop()
    assert metrics_dirs() <= before  # the supervisor removed the shared metrics directory
