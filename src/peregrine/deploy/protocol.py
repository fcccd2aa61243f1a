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

And it can read a request's body straight into the app's buffer (``RECEIVE_INTO``, below): a
bulk body otherwise reached the app through uvicorn's flow-control window, ~64 KiB per ASGI
message, each read copied by uvloop into a ``bytes``, each parsed piece by httptools into
another, appended to a ``bytearray``, copied out of it into the message's ``bytes`` and copied
again into the app's buffer, with reading paused and resumed and the app's task woken for every
message. Now the socket is read into the app's buffer itself (``_BodyReader``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

try:
    import httptools
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - httptools not installed
    HttpToolsProtocol = None

# Long enough for a request already written by a client to arrive and be read (a round trip on
# any network a model server sits on, plus a loaded event loop); short enough that idle pooled
# connections do not hold the shutdown up for long.
DRAIN_IDLE_SECONDS = 0.5

# The scope extension (``scope["extensions"][RECEIVE_INTO]``) through which an app reads the rest
# of a body into its own buffer: ``receive_into(buffer, filled)`` with ``buffer`` a writable
# memoryview of the announced Content-Length and ``filled`` the bytes of it the app already holds
# (from its ``receive()`` messages) returns a future of the body's length once the whole body is
# in ``buffer``, or of None if the client disconnected first. Where the parser frames the body
# by that same Content-Length, the rest of it is read from the socket into the buffer by the
# event loop (``_BodyReader``); otherwise each parsed piece is copied into it as it arrives.
# Reading is not paused meanwhile (the buffer is bounded by the announced length, which the
# app checked), and the app's task wakes once. The app calls
# no ``receive()`` after it (the body is complete). Other servers do not offer it: the app then
# reads messages as ASGI has them.
RECEIVE_INTO = "peregrine.receive_into"


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
            else:  # a large body: one writev of both, no copy (uvloop; asyncio joins them)
                self._transport.writelines((head, data))
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
    flow: Any
    _draining = False
    _drain_timer = None
    # receive_into in progress: the buffer, the bytes in it, and the future of the body's length
    _sink: memoryview | None = None
    _sink_size = 0
    _sink_future: asyncio.Future | None = None

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
        if new is not cycle and new is not None:
            scope = new.scope
            if scope["method"] != "HEAD":
                new.transport = _HeadWithBody(new.transport, new)
            if scope["method"] == "POST":
                scope["extensions"] = {**scope.get("extensions", {}), RECEIVE_INTO: self._into}

    # ---------------------------------------------------------------------- receive_into --
    def _into(self, buffer: memoryview, filled: int) -> asyncio.Future:
        """``RECEIVE_INTO``: the rest of the current request's body into ``buffer``."""
        future = self.loop.create_future()
        cycle = self.cycle
        # the request reading its body is the newest one parsed: the next request's head cannot
        # be parsed before this body's last byte
        if cycle is None or cycle.disconnected or cycle.response_complete:
            future.set_result(None)
            return future
        pending = cycle.body  # parsed since the app's last receive()
        if pending:
            end = filled + len(pending)
            if end > len(buffer):
                raise ValueError("receive_into: the body is longer than the buffer")
            buffer[filled:end] = pending
            filled = end
            cycle.body = bytearray()
        if not cycle.more_body:  # the whole body was in already
            future.set_result(filled)
            return future
        self._sink, self._sink_size, self._sink_future = buffer, filled, future
        if _framed_by(cycle.scope["headers"]) == len(buffer):
            # the rest of the body goes from the socket straight into the buffer, past the
            # parser (which would make a `bytes` of each piece) and uvloop (which would make
            # one of each read): the body's only copy in user space is the kernel's own
            self.transport.set_protocol(_BodyReader(self))
        self.flow.resume_reading()  # paused if the window filled while the app was away
        return future

    def _body_read(self) -> None:
        """The last byte of a body read by ``_BodyReader`` is in the buffer."""
        self.transport.set_protocol(self)
        # the parser last saw part of this body: a fresh one parses the connection's next
        # request (as uvicorn's __init__ makes it)
        self.parser = httptools.HttpRequestParser(self)
        with contextlib.suppress(AttributeError):  # httptools < 0.6.3
            self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self.on_message_complete()

    def _end_sink(self, result: int | None) -> None:
        future = self._sink_future
        self._sink = self._sink_future = None
        if future is not None and not future.done():
            future.set_result(result)

    def on_body(self, body: bytes) -> None:
        sink = self._sink
        if sink is None:
            super().on_body(body)  # type: ignore[misc]
            return
        size = self._sink_size
        end = size + len(body)
        if end > len(sink):  # more than the Content-Length the parser frames by: never
            future = self._sink_future
            self._sink = self._sink_future = None
            if future is not None and not future.done():
                future.set_exception(ValueError("the body is longer than its Content-Length"))
            return
        sink[size:end] = body
        self._sink_size = end

    def on_message_complete(self) -> None:
        super().on_message_complete()  # type: ignore[misc]
        if self._sink is not None:
            self._end_sink(self._sink_size)

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        if self._draining and not self.transport.is_closing():
            self._arm_idle_close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_idle_close()
        if self._sink is not None:
            self._end_sink(None)  # the client went away mid-body
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


def _framed_by(headers: list) -> int | None:
    """The Content-Length the parser frames this request's body by; None for a chunked body
    or an unusual head (the body then goes through the parser)."""
    length = None
    for name, value in headers:
        if name == b"content-length":
            if length is not None or not value.isdigit():
                return None
            length = int(value)
        elif name == b"transfer-encoding":
            return None
    return length


class _BodyReader(asyncio.BufferedProtocol):
    """The connection's protocol while the rest of a body of known length is read
    (``RECEIVE_INTO``): the event loop reads from the socket into the buffer itself
    (uvloop, and asyncio's own loops, read into a protocol's buffer only for a protocol that is
    not an ``asyncio.Protocol``, which uvicorn's are). Each read asks for at most the bytes the
    body still lacks, so nothing of a next request can land in the buffer; the body's last byte
    hands the connection back to the HTTP protocol. Everything else is the HTTP protocol's."""

    __slots__ = ("_http",)

    def __init__(self, http: _Draining) -> None:
        self._http = http

    def get_buffer(self, sizehint: int) -> memoryview:
        http = self._http
        assert http._sink is not None
        return http._sink[http._sink_size :]

    def buffer_updated(self, nbytes: int) -> None:
        http = self._http
        assert http._sink is not None
        http._sink_size += nbytes
        if http._sink_size == len(http._sink):
            http._body_read()

    def eof_received(self) -> bool | None:
        return self._http.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._http.connection_lost(exc)  # ends the read with None: the client left

    def pause_writing(self) -> None:
        self._http.pause_writing()

    def resume_writing(self) -> None:
        self._http.resume_writing()


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
