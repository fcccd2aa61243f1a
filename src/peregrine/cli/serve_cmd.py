"""``peregrine serve ARTIFACT``: an HTTP scoring server with dynamic batching."""

from __future__ import annotations

import argparse

from peregrine.cli._common import CLIError, check_input_file, eprint, naming_file, positive_int

HELP = "serve an artifact over HTTP with dynamic batching"
DESCRIPTION = """\
Serve a compiled artifact over HTTP (uvicorn + Starlette). Each of the artifact's methods is a
route: POST /v1/predict, /v1/predict_proba, /v1/decision_function, /v1/transform, ... with a
JSON body {"rows": [[...], ...]} or {"columns": {"name": [...], ...}}, an .npy array
(Content-Type: application/x-npy) or an Arrow IPC stream
(Content-Type: application/vnd.apache.arrow.stream); the answer comes in the same format.
GET /healthz, GET /v1/model (schema, methods, versions, hash) and GET /metrics (Prometheus).

Concurrent requests are coalesced into one model call of up to --max-batch rows; under load a
request waits at most --max-delay-ms for others, a request on an idle server not at all.
SIGTERM or Ctrl-C stops accepting connections and answers every accepted request first."""

EPILOG = """\
example:
  peregrine serve model.peregrine --port 8000
  curl -s localhost:8000/v1/predict_proba -H 'Content-Type: application/json' \\
       -d '{"rows": [[5.1, 3.5, 1.4, 0.2]]}'

docs/deploy.md has the batching trade-offs, Dask and Spark scoring."""


def nonnegative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def port_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port in 0..65535, got {value}")
    return value


def add_parser(sub: argparse._SubParsersAction, parents: list) -> None:
    p = sub.add_parser(
        "serve",
        help=HELP,
        description=DESCRIPTION,
        epilog=EPILOG,
        parents=parents,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("artifact", metavar="ARTIFACT", help="an artifact from 'peregrine compile'")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1; anything not loopback "
        "needs --allow-remote)",
    )
    p.add_argument(
        "--port",
        type=port_number,
        default=8000,
        help="TCP port (default: 8000; 0 picks a free one and prints it)",
    )
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a --host reachable from other machines (the server has no "
        "authentication or TLS: put it behind a proxy that does)",
    )
    p.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        metavar="N",
        help="worker processes, each with its own copy of the model and its own "
        "batcher (default: 1)",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        default=1,
        metavar="N",
        help="model calls that may run at once in each worker (default: 1)",
    )
    p.add_argument(
        "--max-batch",
        type=positive_int,
        default=1024,
        metavar="ROWS",
        help="rows per model call, at most (default: 1024)",
    )
    p.add_argument(
        "--max-delay-ms",
        type=nonnegative_float,
        default=2.0,
        metavar="MS",
        help="how long a request may wait for others under load (default: 2; "
        "an idle server never waits; 0 never waits)",
    )
    p.add_argument(
        "--inline-ms",
        type=nonnegative_float,
        default=1.0,
        metavar="MS",
        help="model calls predicted to take at most this long run on the event loop "
        "instead of a worker thread (default: 1; 0: always a thread)",
    )
    p.add_argument(
        "--max-body-bytes",
        type=positive_int,
        default=64 << 20,
        metavar="BYTES",
        help="larger request bodies get 413 (default: 64 MiB)",
    )
    p.add_argument(
        "--max-queue-rows",
        type=positive_int,
        default=1 << 18,
        metavar="ROWS",
        help="rows waiting for the model, at most; beyond it requests get 503 (default: 262144)",
    )
    p.add_argument(
        "--backend",
        metavar="NAME",
        help="rebuild the artifact for another backend (default: the saved one)",
    )
    p.add_argument(
        "--graceful-timeout",
        type=nonnegative_float,
        default=30.0,
        metavar="S",
        help="on SIGTERM, seconds to finish accepted requests (default: 30)",
    )
    p.add_argument("--access-log", action="store_true", help="log every request")
    p.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    for module in ("uvicorn", "starlette", "prometheus_client"):
        try:
            __import__(module)
        except ImportError:
            raise CLIError(
                f"peregrine serve needs {module}, which is not installed; "
                "pip install 'peregrine-ml[serve]'"
            ) from None
    from peregrine.deploy import ServeConfig, serve

    check_input_file(args.artifact, "artifact")
    config = ServeConfig(
        artifact=args.artifact,
        max_batch=args.max_batch,
        max_delay_ms=args.max_delay_ms,
        max_body_bytes=args.max_body_bytes,
        max_queue_rows=args.max_queue_rows,
        threads=args.threads,
        inline_ms=args.inline_ms,
        backend=args.backend,
    )
    with naming_file(args.artifact):
        serve(
            config,
            host=args.host,
            port=args.port,
            workers=args.workers,
            allow_remote=args.allow_remote,
            log_level=args.log_level,
            access_log=args.access_log,
            graceful_timeout=args.graceful_timeout,
            announce=lambda url: eprint(f"peregrine serve: listening on {url}"),
        )
    return 0
