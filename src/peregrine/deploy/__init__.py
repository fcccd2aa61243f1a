"""Serving compiled models over HTTP (``peregrine serve``): a Starlette app under uvicorn with
dynamic batching, Prometheus metrics and bounded queues. Needs the ``serve`` extra
(``pip install 'peregrine-ml[serve]'``); ``import peregrine`` does not import it.

>>> from peregrine.deploy import ServeConfig, create_app, serve
>>> serve(ServeConfig("model.peregrine", max_batch=512, max_delay_ms=1), port=8000)
"""

from peregrine.deploy.app import ServeConfig, create_app
from peregrine.deploy.batcher import Batcher, QueueFull
from peregrine.deploy.server import RemoteBindRefused, is_loopback, serve

__all__ = [
    "Batcher",
    "QueueFull",
    "RemoteBindRefused",
    "ServeConfig",
    "create_app",
    "is_loopback",
    "serve",
]
