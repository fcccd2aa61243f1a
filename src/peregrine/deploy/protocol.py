"""uvicorn's HTTP protocol with a graceful close of keep-alive connections on shutdown.

On SIGTERM uvicorn closes at once every connection on which no request is being answered. A
keep-alive client may have written its next request at that moment: the request is on the wire
or in the socket's receive buffer, unread, and the close (a reset, with data unread) loses it
after the client sent it. Under load that happens to a few requests per shutdown (HTTP/1.1's
keep-alive close race, RFC 9112 section 9.3.1). The same happened to a connection whose answer
was being written: uvicorn marked it ``keep_alive = False`` after its headers had gone out
without ``Connection: close``, so the client learnt of the close only by sending into it.

Here a connection is *drained* instead, so that a client is always told before its connection
ends:

- a request arriving on it after shutdown began is answered, with ``Connection: close``, and
  the connection closes after that answer (the client reconnects and is refused);
- a request whose answer has not started yet is answered with ``Connection: close`` (as
  uvicorn does);
- an answer already under way completes; the connection then counts as idle;
- an idle connection stays open for ``DRAIN_IDLE_SECONDS``, to let a request already sent reach
  the server, and is closed if none came (part of a request's head restarts the wait). Only a request written exactly as that close happens
  (after the client left the connection idle for that long) can still meet it: no request the
  server has read is ever dropped, so a client that sees its connection end without an answer
  may retry (scoring is idempotent).

uvicorn waits for every connection to close before the app's lifespan shutdown (which drains
the batcher), and at most ``timeout_graceful_shutdown`` seconds for all of it.

The same protocol also writes each answer's head and body in one ``send(2)``: uvicorn writes the
status line and headers at ``http.response.start`` and the body at ``http.response.body``, and
uvloop sends each write at once, so a small answer cost two system calls and two TCP segments
(on loopback the receiving side of both runs on the sender's CPU too). ``_HeadWithBody`` holds
the head until the body's first write.
"""

from __future__ import annotations

from typing import Any

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - httptools not installed
    HttpToolsProtocol = None

# Long enough for a request already written by a client to arrive and be read (a round trip on
# any network a model server sits on, plus a loaded event loop); short enough that idle pooled
# connections do not hold the shutdown up for long.
DRAIN_IDLE_SECONDS = 0.5


class _HeadWithBody:
    """The transport one request's cycle writes to: the answer's head (the cycle's first write
    after its answer started) is held and goes out with the body's first write, in one write.
    Writes before the answer started (``100 Continue``) pass at once; a close writes what is
    held first. Not used for HEAD requests, whose answers have no body write."""

    __slots__ = ("_transport", "_cycle", "_head", "_passed")

    def __init__(self, transport: Any, cycle: Any) -> None:
        self._transport, self._cycle = transport, cycle
        self._head: bytes | None = None
        self._passed = False  # the head went out: every later write passes straight through

    def write(self, data: bytes) -> None:
        if self._passed:
            self._transport.write(data)
        elif self._head is not None:
            self._passed = True
            head, self._head = self._head, None
            if len(data) < 65536:
                self._transport.write(head + data)
            else:  # a large body: not worth a copy to save one write
                self._transport.write(head)
                self._transport.write(data)
        elif self._cycle.response_started:
            self._head = data
        else:
            self._transport.write(data)

    def close(self) -> None:
        if self._head is not None:
            self._passed = True
            self._transport.write(self._head)
            self._head = None
        self._transport.close()

    def __getattr__(self, name: str) -> Any:  # is_closing, get_extra_info...
        return getattr(self._transport, name)


class _Draining:
    """Mixed in ahead of uvicorn's httptools protocol class."""

    cycle: Any
    transport: Any
    loop: Any
    _draining = False
    _drain_timer = None

    def shutdown(self) -> None:  # called by uvicorn's Server.shutdown for each connection
        self._draining = True
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            self._arm_idle_close()
        elif not cycle.response_started:
            cycle.keep_alive = False  # the answer will say Connection: close
        # else: the answer is being written with keep-alive headers; once it completes the
        # connection is idle (on_response_complete arms the idle close)

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        if self._draining:  # adopted from the listen backlog during shutdown (DrainingServer)
            self._arm_idle_close()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # type: ignore[misc]
        if self._draining:
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:
                self._cancel_idle_close()
                if not cycle.response_started:
                    cycle.keep_alive = False
            elif self._drain_timer is not None:
                self._arm_idle_close()  # part of a request's head: the idle window restarts

    def on_headers_complete(self) -> None:
        cycle = self.cycle
        super().on_headers_complete()  # type: ignore[misc]
        new = self.cycle
        if new is not cycle and new is not None and new.scope["method"] != "HEAD":
            new.transport = _HeadWithBody(new.transport, new)

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        if self._draining and not self.transport.is_closing():
            self._arm_idle_close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_idle_close()
        super().connection_lost(exc)  # type: ignore[misc]

    def _arm_idle_close(self) -> None:
        self._cancel_idle_close()
        self._drain_timer = self.loop.call_later(DRAIN_IDLE_SECONDS, self._close_if_idle)

    def _cancel_idle_close(self) -> None:
        if self._drain_timer is not None:
            self._drain_timer.cancel()
            self._drain_timer = None

    def _close_if_idle(self) -> None:
        self._drain_timer = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            super().shutdown()  # type: ignore[misc]  # uvicorn's close of an idle connection
        # else a request arrived meanwhile: it is answered with Connection: close (or, if its
        # answer had started, the idle close is armed again when it completes)


if HttpToolsProtocol is not None:

    class DrainingHttpTools(_Draining, HttpToolsProtocol):
        """uvicorn's httptools protocol (the C parser; uvicorn's default), draining on
        shutdown."""

else:  # pragma: no cover - httptools is a dependency of peregrine-ml[serve]
    DrainingHttpTools = None


def draining_protocol() -> type | str:
    """For ``uvicorn.Config(http=...)``: the httptools protocol with the draining shutdown.
    Without httptools, uvicorn's own choice ("auto": h11, which closes connections at
    shutdown as uvicorn does; its answers cannot say ``Connection: close`` when the request
    did not, so it is not drained)."""
    return "auto" if DrainingHttpTools is None else DrainingHttpTools
