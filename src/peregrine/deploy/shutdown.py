"""Shutdown on SIGTERM without losing requests clients have sent: the listen backlog is
accepted before the listening socket closes, in one process and with ``--workers N``.

The connections themselves drain in ``protocol.py``. Here: a client's connection is complete,
and its request written, as soon as the kernel has it in the listening socket's backlog, before
the server accepts it; closing the listening socket resets every connection still there.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket

import uvicorn
from uvicorn.supervisors import multiprocess

log = logging.getLogger("uvicorn.error")  # beside uvicorn's own "Shutting down" lines


class DrainingServer(uvicorn.Server):
    """uvicorn's server, which on shutdown first accepts what waits in the listen backlog.

    Under load, requests written in the last turn of the event loop before shutdown were lost
    to the reset of the backlog (several per SIGTERM with clients reconnecting). Here the
    backlog is accepted first (each connection drains: its request is answered with
    ``Connection: close``), then the socket is closed. Only a connection completing in the
    microseconds between the last ``accept`` and the close can still be reset; a client
    connecting after that is refused.
    """

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._adopt_backlog()
        await super().shutdown(sockets=sockets)

    def _adopt_backlog(self) -> None:
        loop = asyncio.get_running_loop()
        config, state = self.config, self.server_state
        app_state = self.lifespan.state

        def draining() -> asyncio.Protocol:
            protocol = config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=state, app_state=app_state
            )
            protocol._draining = True
            return protocol

        self._adopting: set[asyncio.Task] = set()
        for server in self.servers:
            for listening in server.sockets:
                # a second descriptor of the same socket: accept() on it drains the backlog
                listener = socket.socket(fileno=os.dup(listening.fileno()))
                try:
                    listener.setblocking(False)
                    while True:
                        try:
                            conn, _ = listener.accept()
                        except OSError:  # BlockingIOError: the backlog is empty
                            break
                        conn.setblocking(False)
                        task = loop.create_task(loop.connect_accepted_socket(draining, conn))
                        self._adopting.add(
                            task
                        )  # held until connection_made (uvicorn's 0.1 s pause)
                        task.add_done_callback(self._adopting.discard)
                finally:
                    listener.close()
        if self._adopting:
            log.info("answering %d connections accepted from the backlog", len(self._adopting))


class DrainingProcess(multiprocess.Process):
    """A ``--workers N`` worker whose server is a :class:`DrainingServer`."""

    @property
    def server(self) -> uvicorn.Server:
        if self._server is None:
            self._server = DrainingServer(config=self.config)
        return self._server


class DrainingMultiprocess(multiprocess.Multiprocess):
    """uvicorn's supervisor, with workers that accept their backlog before closing, and which
    closes its own copy of the listening socket before it stops them.

    uvicorn's supervisor holds the listening socket until every worker has exited, so during
    the workers' graceful shutdown the kernel kept completing connections into a backlog that
    nobody would accept, and reset them all at the end: with clients reconnecting, every one of
    them lost a request. With the supervisor's copy closed first, the socket closes when the
    last worker closes its own (after accepting its backlog); later connections are refused.
    """

    def terminate_all(self) -> None:
        for sock in self.sockets:
            sock.close()
        super().terminate_all()

    def run(self) -> None:
        # uvicorn's supervisor creates its workers (at start, on restarts) as
        # ``multiprocess.Process``; the name is replaced for this supervisor's run only, and
        # the spawned workers unpickle the class by its own name, so they run DrainingServer
        original = multiprocess.Process
        multiprocess.Process = DrainingProcess
        try:
            super().run()
        finally:
            multiprocess.Process = original
