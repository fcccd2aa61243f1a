"""Run an app on a free loopback port in a background thread: for tests and notebooks.

>>> with running_server(create_app(ServeConfig("model.peregrine"))) as url:
...     httpx.post(f"{url}/v1/predict", json={"rows": [[1.0, 2.0]]}).json()
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def running_server(
    app: Any,
    *,
    host: str = "127.0.0.1",
    timeout: float = 30.0,
    graceful_timeout: float = 10.0,
    loop: str = "auto",
) -> Iterator[str]:
    """Serve ``app`` with uvicorn on ``host`` and a port the OS picks; yields the base URL and
    shuts the server down (gracefully) on exit. ``loop``: uvicorn's choice of event loop
    ("auto": uvloop where installed, as `peregrine serve`; "asyncio": the standard one)."""
    import uvicorn

    from peregrine.deploy.protocol import draining_protocol

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(  # the protocol `peregrine serve` runs (protocol.py)
        app,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=graceful_timeout,
        http=draining_protocol(),
        loop=loop,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="peregrine-test-server"
    )
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError("the server did not start")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout + graceful_timeout)
        sock.close()
