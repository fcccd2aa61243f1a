"""Run the app under uvicorn: bind (loopback unless told otherwise), one or N worker processes,
graceful shutdown on SIGTERM/SIGINT (uvicorn stops accepting, answers the requests it accepted,
keep-alive connections drain (``protocol.py``), then the app's lifespan drains the batcher)."""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import sys
import tempfile

from peregrine.deploy.app import CONFIG_ENV, ServeConfig, create_app, settle_heap
from peregrine.deploy.metrics import MULTIPROC_ENV
from peregrine.errors import PeregrineError


class RemoteBindRefused(PeregrineError):
    """A non-loopback address was asked for without ``allow_remote``."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: resolve it and require every address to be loopback
        try:
            infos = socket.getaddrinfo(host, None)
        except OSError:
            return False
        return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def serve(
    config: ServeConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 1,
    allow_remote: bool = False,
    log_level: str = "info",
    access_log: bool = False,
    graceful_timeout: float = 30.0,
    announce=None,
) -> None:
    """Serve ``config.artifact`` until SIGTERM/SIGINT. ``announce(url)`` is called once the
    socket is bound (the CLI prints it; with ``port=0`` it carries the port the OS chose)."""
    import uvicorn

    from peregrine.deploy.protocol import draining_protocol
    from peregrine.deploy.shutdown import DrainingMultiprocess, DrainingServer

    if not allow_remote and not is_loopback(host):
        raise RemoteBindRefused(
            f"refusing to listen on {host!r}, which is reachable from other machines; pass "
            "--allow-remote (and put the server behind TLS and authentication) to do so"
        )
    common = dict(
        host=host,
        port=port,
        log_level=log_level,
        access_log=access_log,
        # X-Forwarded-For/-Proto only change the client address and scheme in the scope, which
        # nothing but the access log reads: without it uvicorn's middleware is one coroutine
        # and a header scan per request for nothing
        proxy_headers=access_log,
        timeout_graceful_shutdown=graceful_timeout,
        lifespan="on",
        backlog=4096,
        server_header=False,
        http=draining_protocol(),  # keep-alive connections closed without losing requests
    )
    metrics_dir = None
    if workers > 1:
        # each worker process loads the artifact itself (import string + config in its env)
        create_app(config)  # fail here, once, on a bad artifact rather than in N children
        os.environ[CONFIG_ENV] = config.to_env()
        if not os.environ.get(MULTIPROC_ENV):
            # the workers (spawned, so their prometheus_client is imported afresh) share their
            # metrics through files here: /metrics on any worker counts all of them
            metrics_dir = tempfile.mkdtemp(prefix="peregrine-metrics-")
            os.environ[MULTIPROC_ENV] = metrics_dir
        uconfig = uvicorn.Config(
            "peregrine.deploy.app:app_from_env", factory=True, workers=workers, **common
        )
    else:
        uconfig = uvicorn.Config(create_app(config), **common)
        settle_heap()
    sock = uconfig.bind_socket()
    bound = sock.getsockname()
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    if announce is not None:
        announce(f"http://{shown}:{bound[1]}")
    server = DrainingServer(uconfig)
    try:
        if workers > 1:
            DrainingMultiprocess(uconfig, sockets=[sock]).run()
        else:
            server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
        if metrics_dir is not None:
            os.environ.pop(MULTIPROC_ENV, None)
            shutil.rmtree(metrics_dir, ignore_errors=True)
    if workers == 1 and not server.started:
        sys.exit(3)  # uvicorn's STARTUP_FAILURE: the lifespan failed
