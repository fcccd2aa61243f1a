"""The ASGI app of ``peregrine serve`` (Starlette), one compiled model per app.

Routes: ``POST /v1/<method>`` for each of the artifact's methods (others: 404), ``GET /healthz``,
``GET /v1/model``, ``GET /metrics``. Bodies: JSON, ``.npy`` or an Arrow IPC stream, chosen by
Content-Type; the response uses the request's format (``formats.py``). Every error is a JSON
object ``{"error": message, "type": kind}``: 400 for bodies the model rejects (the model's own
typed error, naming row and column), 404 unknown route or method, 413 body over the limit,
415 unknown Content-Type, 503 queue full or shutting down, 500 anything unexpected.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import platform
import sys
import time
import zipfile
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from peregrine.deploy import formats
from peregrine.deploy.batcher import Batcher, QueueFull, ShuttingDown
from peregrine.deploy.metrics import new_metrics
from peregrine.deploy.protocol import RECEIVE_INTO
from peregrine.errors import PeregrineError

log = logging.getLogger("peregrine.serve")

SCORING_METHODS = (
    "predict",
    "predict_proba",
    "predict_log_proba",
    "decision_function",
    "transform",
    "score_samples",
)
# JSON bodies above this size, and JSON answers with more values, are decoded and encoded in a
# worker thread (a few milliseconds), not on the event loop; binary formats are memory copies
OFFLOAD_BYTES, OFFLOAD_VALUES = 256 << 10, 16384
CONFIG_ENV = "PEREGRINE_SERVE_CONFIG"  # how `--workers N` hands the config to each process


@dataclass(frozen=True)
class ServeConfig:
    """What one server process needs; every field has the CLI flag of the same name."""

    artifact: str
    max_batch: int = 1024
    max_delay_ms: float = 2.0
    max_body_bytes: int = 64 << 20
    max_queue_rows: int = 1 << 18
    threads: int = 1
    inline_ms: float = 1.0
    backend: str | None = None

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls) -> ServeConfig:
        return cls(**json.loads(os.environ[CONFIG_ENV]))


class _TooLarge(Exception):
    pass


_JSON_TYPE = formats.JSON.encode()
_MEDIA = {fmt: fmt.encode() for fmt in formats.FORMATS}  # the answer's Content-Type


def _error_body(message: str, kind: str) -> bytes:
    return json.dumps({"error": message, "type": kind}).encode()


def _error(status: int, message: str, kind: str, headers: dict | None = None) -> Response:
    return Response(_error_body(message, kind), status, headers=headers, media_type=formats.JSON)


class _ServeApp(Starlette):
    """Starlette, except that ``POST /v1/<method>`` goes straight to the scoring handler (every
    other route, the lifespan and the error pages are Starlette's)."""

    def __init__(self, score: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._score = score

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path = scope["path"]
            if path.startswith("/v1/") and len(path) > 4 and "/" not in path[4:]:
                await self._score(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def _versions() -> dict[str, str]:
    import numpy
    import starlette
    import uvicorn

    from peregrine import __version__

    return {
        "peregrine": __version__,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "starlette": starlette.__version__,
        "uvicorn": uvicorn.__version__,
    }


def _artifact_versions(path: str) -> dict[str, Any]:
    """The library versions recorded in the artifact's manifest (informational; {} if absent)."""
    try:
        with zipfile.ZipFile(path) as zf:
            body = json.loads(zf.read("manifest.json"))["body"]
        return {
            "compiled_with": body.get("versions", {}),
            "source_libraries": body.get("spec", {}).get("versions", {}),
        }
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return {}


def create_app(config: ServeConfig, model: Any = None) -> Starlette:
    """The app serving ``config.artifact`` (loaded with the safe ``peregrine.load``), or
    ``model`` when given (tests, embedding)."""
    if model is None:
        import peregrine

        model = peregrine.load(config.artifact, backend=config.backend)
    methods = tuple(m for m in SCORING_METHODS if m in model.methods)
    names = model.feature_names_in_
    feature_names = None if names is None else tuple(str(n) for n in names)
    classes = model.classes_
    class_list = None if classes is None else classes.tolist()  # JSON answers carry it as is
    metrics = new_metrics(getattr(model, "content_hash", None), str(model))
    batcher = Batcher(
        model,
        max_batch=config.max_batch,
        max_delay=config.max_delay_ms / 1000,
        max_queue_rows=config.max_queue_rows,
        threads=config.threads,
        inline_seconds=config.inline_ms / 1000,
        on_call=metrics.on_call,
    )
    description = {
        "source": model.explain_dict().get("source"),
        "content_hash": getattr(model, "content_hash", None),
        "methods": list(methods),
        "n_features": int(model.n_features_in_),
        "feature_names": None if feature_names is None else list(feature_names),
        "classes": None if classes is None else classes.tolist(),
        "input_formats": list(formats.FORMATS),
        "batching": {
            "max_batch": config.max_batch,
            "max_delay_ms": config.max_delay_ms,
            "max_queue_rows": config.max_queue_rows,
            "threads": config.threads,
            "inline_ms": config.inline_ms,
        },
        "max_body_bytes": config.max_body_bytes,
        "versions": {**_versions(), **_artifact_versions(config.artifact)},
        "explain": model.explain_dict(),
    }

    async def read_rest(
        scope: dict, receive: Any, body: bytes, announced: int | None
    ) -> bytes | memoryview:
        """The rest of a body that did not come in one message (its first part: ``body``).

        A bulk body comes in messages of ~64-256 KB. With its length announced, each is copied
        into one buffer as it arrives, while it is still in cache, and freed at once; joining
        them at the end re-read the whole body (2.2 MB for 10K rows of 28 floats) from memory,
        and bytes.join of over 1 MB also released the GIL and waited to take it back from the
        model's thread. The buffer is np.empty's: its pages are touched only as the body arrives
        (a client announcing 64 MiB and sending 1 KB costs 1 KB, as the chunk list did; a
        bytearray would zero all 64 MiB up front). Chunked bodies (no length) are joined.

        Under ``peregrine serve`` (its protocol's ``RECEIVE_INTO`` extension) the server itself
        copies each parsed piece into that buffer, with no ASGI message per piece."""
        chunks = None
        if announced is not None and len(body) <= announced:
            view = memoryview(np.empty(announced, np.uint8))
            view[: len(body)] = body
            into = scope.get("extensions", {}).get(RECEIVE_INTO)
            if into is not None:
                size = await into(view, len(body))
                if size is None:
                    raise ClientDisconnect
                return view if size == announced else bytes(view[:size])
        else:
            chunks = [body]
        size = len(body)
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnect
            chunk = message.get("body", b"")
            end = size + len(chunk)
            if end > config.max_body_bytes:
                raise _TooLarge
            if chunks is None and end > announced:  # longer than announced: keep it all
                chunks = [bytes(view[:size])]
            if chunks is None:
                view[size:end] = chunk
            else:
                chunks.append(chunk)
            size = end
            if not message.get("more_body", False):
                if chunks is not None:
                    return b"".join(chunks)
                return view if size == announced else bytes(view[:size])

    async def score(scope: dict, receive: Any, send: Any) -> None:
        """``POST /v1/<method>`` as a plain ASGI handler: Starlette's request, response and
        middleware objects cost more per request than the rest of this handler."""
        t0 = time.perf_counter()
        method = scope["path"][4:]
        fmt = "-"
        headers: list[tuple[bytes, bytes]] | None = None
        if method not in methods:
            status, kind = 404, "NotFound"
            data = _error_body(
                f"{model} has no method {method!r}; it serves {', '.join(methods)}", kind
            )
        else:
            content_type = length = None
            for name, value in scope["headers"]:
                if name == b"content-type":
                    content_type = value
                elif name == b"content-length":
                    length = value
            try:
                fmt = formats.media_type_of(content_type)
                announced = int(length) if length is not None and length.isdigit() else None
                if announced is not None and announced > config.max_body_bytes:
                    raise _TooLarge
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientDisconnect
                body = message.get("body", b"")
                if len(body) > config.max_body_bytes:
                    raise _TooLarge
                if message.get("more_body", False):  # else the whole body: no copy
                    body = await read_rest(scope, receive, body, announced)
                if fmt == formats.JSON and len(body) > OFFLOAD_BYTES:
                    payload = await asyncio.to_thread(formats.decode, body, fmt, feature_names)
                else:
                    payload = formats.decode(body, fmt, feature_names)
                out = await batcher.enqueue(method, payload.key, payload.data, payload.rows)
                labels = class_list if method == "predict_proba" else None
                if fmt == formats.JSON and out.size > OFFLOAD_VALUES:
                    data = await asyncio.to_thread(formats.encode, out, fmt, labels)
                else:
                    data = formats.encode(out, fmt, labels)
                status, kind = 200, ""
            except ClientDisconnect:
                status, kind = 499, "ClientDisconnect"  # nobody to answer; nginx's code
                data = b""
            except formats.BodyError as exc:
                status, kind = exc.status, "BodyError"
                data = _error_body(str(exc), kind)
            except _TooLarge:
                status, kind = 413, "TooLarge"
                data = _error_body(
                    f"request body exceeds {config.max_body_bytes} bytes "
                    "(--max-body-bytes); send fewer rows per request",
                    kind,
                )
            except (QueueFull, ShuttingDown) as exc:
                status, kind = 503, type(exc).__name__
                data = _error_body(str(exc), kind)
                headers = [(b"retry-after", b"1")]
            except PeregrineError as exc:
                status, kind = 400, type(exc).__name__
                data = _error_body(str(exc), kind)
            except Exception as exc:  # noqa: BLE001 - a server answers; the log keeps the trace
                log.exception("scoring %s failed", method)
                status, kind = 500, "InternalError"
                data = _error_body(f"internal error: {type(exc).__name__}: {exc}", kind)
        media = _MEDIA[fmt] if status == 200 else _JSON_TYPE
        head = [(b"content-type", media), (b"content-length", b"%d" % len(data))]
        if headers:
            head += headers
        await send({"type": "http.response.start", "status": status, "headers": head})
        await send({"type": "http.response.body", "body": data})
        metrics.request_done(method, fmt, status, kind, time.perf_counter() - t0)

    async def healthz(request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type=formats.JSON)

    async def describe(request: Request) -> Response:
        doc = {**description, "pid": os.getpid(), "stats": asdict(batcher.stats)}
        return Response(json.dumps(doc, default=str).encode(), media_type=formats.JSON)

    async def scrape(request: Request) -> Response:
        data, content_type = metrics.exposition(batcher.queued_rows)
        return Response(data, headers={"Content-Type": content_type})

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kind = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "HTTPError")
        metrics.error(kind)
        return _error(
            exc.status_code,
            f"{request.method} {request.url.path}: {exc.detail}",
            kind,
            dict(exc.headers or {}),
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        await batcher.start()
        log.info(
            "serving %s (%s) methods %s",
            config.artifact,
            description["content_hash"],
            ", ".join(methods),
        )
        try:
            yield
        finally:
            await batcher.stop()  # after uvicorn answered the accepted requests
            metrics.close()

    async def not_here(request: Request) -> Response:  # POST /v1/<method> never gets here
        raise HTTPException(500)

    app = _ServeApp(
        score,
        routes=[
            Route("/v1/{method}", not_here, methods=["POST"]),  # GET on it: Starlette's 405
            Route("/healthz", healthz, methods=["GET"]),
            Route("/v1/model", describe, methods=["GET"]),
            Route("/metrics", scrape, methods=["GET"]),
        ],
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
    app.state.batcher = batcher
    app.state.metrics = metrics
    app.state.model = model
    return app


def app_from_env() -> Starlette:
    """Factory for ``--workers N``: each worker process builds its app from the environment."""
    app = create_app(ServeConfig.from_env())
    settle_heap()
    return app


def settle_heap() -> None:
    """For a process that only serves (the CLI's server and its workers; never called by
    ``create_app``, which tests and notebooks embed): the ~45K objects of the loaded libraries
    and model move out of the collector's reach (``gc.freeze``), and young-generation
    collections come every 10K allocations instead of 700. A request allocates about a hundred
    tracked objects (ASGI messages, tasks, futures), nearly all freed by reference counting;
    each full collection walked the whole heap (~20 ms on a loaded core, stalling every request
    in flight) and the young ones cost ~3 us per request."""
    gc.collect()
    gc.freeze()
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(young, 10_000), middle, old)
    _steady_malloc()


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def _steady_malloc() -> None:
    """Bulk bodies (a 10K x 28 float64 Arrow body: a 2.2 MB buffer for the body and one for
    its rows, per request) come from the heap and stay there for the next body: allocations up
    to 32 MiB are not mmapped, and free memory at the heap's top is trimmed only beyond
    64 MiB. With glibc's own thresholds (which move with what was freed last) the server went
    in and out of a state where each body cost ~200 page faults (its buffers mmapped, zeroed by
    the kernel and unmapped again): 0.3-0.4 ms more of the event loop's CPU per body
    (docs/deploy.md). Only for a process that serves (``settle_heap``); not glibc: nothing."""
    if not sys.platform.startswith("linux") or os.environ.get("PEREGRINE_SERVE_MALLOC") == "0":
        return
    import ctypes

    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return
    mallopt(_M_MMAP_THRESHOLD, 32 << 20)
    mallopt(_M_TRIM_THRESHOLD, 64 << 20)
