"""Streamed answers: exec output (ndjson), the main process's log, file bytes, events (SSE).

Sync streams open their request when created (so a 404 raises at the call) and close when
exhausted, on ``close()``, or at the end of a ``with`` block. Async streams open on the
first ``async for`` step or on ``async with``.
"""
from __future__ import annotations

import time
from typing import Any, AsyncIterator, Generator, Iterator, Optional, Sequence, TypeVar, Union

import httpx

from ._base import (ExecCollector, Req, SSEParser, event_matches, events_headers, exec_chunk,
                    file_response_check, transport_error)
from .errors import ConnectionFailed, ServiceUnavailable, StreamError, Timeout
from .models import Event, ExecChunk, ExecResult

T = TypeVar("T")

__all__ = ["ExecStream", "AsyncExecStream", "ByteStream", "AsyncByteStream", "TextStream",
           "AsyncTextStream", "EventStream", "AsyncEventStream"]


class _SyncStream:
    def __init__(self, client: Any, req: Req) -> None:
        self._client = client
        self._req = req
        self._resp: Optional[httpx.Response] = client._open(req)

    def close(self) -> None:
        r, self._resp = self._resp, None
        if r is not None:
            r.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def _guard(self, it: Iterator[T]) -> Iterator[T]:
        try:
            yield from it
        except httpx.TransportError as e:
            raise StreamError(0, "stream_broken", f"the stream broke off: {e}") from e
        finally:
            self.close()


class _AsyncStream:
    def __init__(self, client: Any, req: Req) -> None:
        self._client = client
        self._req = req
        self._resp: Optional[httpx.Response] = None
        self._it: Optional[AsyncIterator[Any]] = None

    async def _ensure(self) -> httpx.Response:
        if self._resp is None:
            self._resp = await self._client._aopen(self._req)
        return self._resp

    async def aclose(self) -> None:
        r, self._resp = self._resp, None
        if r is not None:
            await r.aclose()

    async def __aenter__(self) -> Any:
        await self._ensure()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def __aiter__(self) -> Any:
        return self

    async def __anext__(self) -> Any:
        if self._it is None:
            self._it = self._items()
        try:
            return await self._it.__anext__()
        except StopAsyncIteration:
            await self.aclose()
            raise
        except httpx.TransportError as e:
            await self.aclose()
            raise StreamError(0, "stream_broken", f"the stream broke off: {e}") from e
        except BaseException:
            await self.aclose()
            raise

    def _items(self) -> AsyncIterator[Any]:  # pragma: no cover - overridden
        raise NotImplementedError


class _ExecResults:
    """What the exec streams share besides I/O: turning ndjson lines into chunks and
    gathering them into the result."""

    _collector: ExecCollector
    result: Optional[ExecResult]

    def _start_results(self) -> None:
        self._collector = ExecCollector()
        self.result = None

    def _chunk(self, line: str) -> Optional[ExecChunk]:
        """One ndjson line: its chunk (None for a blank line), added to the result."""
        c = exec_chunk(line)
        if c is not None:
            self._collector.add(c)
            if c.is_exit:
                self.result = self._collector.result()
        return c

    def _end(self) -> ExecResult:
        """The stream is over: the result; StreamError if no exit line came."""
        if self.result is None:
            self._collector.result()  # raises: no exit line
        assert self.result is not None
        return self.result

    @property
    def exit_code(self) -> Optional[int]:
        return None if self.result is None else self.result.get("exit_code")


class ExecStream(_ExecResults, _SyncStream):
    """The chunks of a running command, as they come::

        for chunk in sb.exec_stream("make"):
            print(chunk.type, chunk.output, end="")
        ... stream.result  # the ExecResult, once the stream is exhausted

    Yields :class:`~sandboxer.ExecChunk` (``stdout``, ``stderr``, then one ``exit``).
    An ``error`` line raises :class:`~sandboxer.StreamError`.
    """

    def __init__(self, client: Any, req: Req) -> None:
        super().__init__(client, req)
        self._start_results()
        self._iter = self._guard(self._gen())

    def _gen(self) -> Iterator[ExecChunk]:
        assert self._resp is not None
        for line in self._resp.iter_lines():
            c = self._chunk(line)
            if c is not None:
                yield c
        self._end()

    def __iter__(self) -> Iterator[ExecChunk]:
        return self._iter

    def __next__(self) -> ExecChunk:
        return next(self._iter)

    def collect(self) -> ExecResult:
        """Read the rest of the stream and return the whole result."""
        for _ in self._iter:
            pass
        return self._end()


class AsyncExecStream(_ExecResults, _AsyncStream):
    """``async for chunk in sb.exec_stream(...)``; ``await stream.collect()``."""

    def __init__(self, client: Any, req: Req) -> None:
        super().__init__(client, req)
        self._start_results()

    async def _items(self) -> AsyncIterator[ExecChunk]:
        r = await self._ensure()
        async for line in r.aiter_lines():
            c = self._chunk(line)
            if c is not None:
                yield c
        self._end()

    async def collect(self) -> ExecResult:
        """Read the rest of the stream and return the whole result."""
        async for _ in self:
            pass
        return self._end()


class ByteStream(_SyncStream):
    """A file's bytes, in chunks (``for chunk in sb.iter_file(path)``)."""

    def __init__(self, client: Any, req: Req, path: str = "", chunk_size: Optional[int] = None):
        super().__init__(client, req)
        assert self._resp is not None
        try:
            file_response_check(self._resp, path)
        except Exception:
            self.close()
            raise
        self.size: Optional[int] = _length(self._resp)
        self._iter = self._guard(iter(self._resp.iter_bytes(chunk_size)))

    def __iter__(self) -> Iterator[bytes]:
        return self._iter

    def __next__(self) -> bytes:
        return next(self._iter)

    def read(self) -> bytes:
        return b"".join(self._iter)


class AsyncByteStream(_AsyncStream):
    def __init__(self, client: Any, req: Req, path: str = "", chunk_size: Optional[int] = None):
        super().__init__(client, req)
        self._path = path
        self._chunk_size = chunk_size
        self.size: Optional[int] = None

    async def _ensure(self) -> httpx.Response:
        fresh = self._resp is None
        r = await super()._ensure()
        if fresh:
            try:
                file_response_check(r, self._path)
            except Exception:
                await self.aclose()
                raise
            self.size = _length(r)
        return r

    async def _items(self) -> AsyncIterator[bytes]:
        r = await self._ensure()
        async for b in r.aiter_bytes(self._chunk_size):
            yield b

    async def read(self) -> bytes:
        return b"".join([b async for b in self])


class TextStream(_SyncStream):
    """Text as it comes (the main process's log, followed until it exits)."""

    def __init__(self, client: Any, req: Req) -> None:
        super().__init__(client, req)
        assert self._resp is not None
        self._iter = self._guard(t for t in self._resp.iter_text() if t)

    def __iter__(self) -> Iterator[str]:
        return self._iter

    def __next__(self) -> str:
        return next(self._iter)

    def read(self) -> str:
        return "".join(self._iter)


class AsyncTextStream(_AsyncStream):
    async def _items(self) -> AsyncIterator[str]:
        r = await self._ensure()
        async for t in r.aiter_text():
            if t:
                yield t

    async def read(self) -> str:
        return "".join([t async for t in self])


def _length(r: httpx.Response) -> Optional[int]:
    try:
        return int(r.headers["content-length"])
    except (KeyError, ValueError):
        return None


# ---- events ----

class _EventsBase:
    """What the event streams share besides I/O: the request, filtering, the deadline,
    max_events and what a failed connection means (end, reconnect or raise)."""

    def __init__(self, client: Any, last_event_id: Optional[Union[int, str]] = None,
                 sandbox: Optional[str] = None, types: Optional[Sequence[str]] = None,
                 timeout: Optional[float] = None, reconnect: bool = True,
                 max_events: Optional[int] = None, since: Optional[float] = None) -> None:
        self._client = client
        self._resp: Optional[httpx.Response] = None
        self._since = since
        self.last_event_id = last_event_id
        self._sandbox = sandbox
        self._types = list(types) if types is not None else None
        self._timeout = timeout
        self._reconnect = reconnect
        self._left = max_events
        self._closed = False
        self._deadline: Optional[float] = None

    def _req(self) -> Req:
        read = self._timeout if self._timeout is not None else 60.0  # heartbeats every 15 s
        # The daemon skips what came before `since` itself (its ?since=); _accept checks too.
        params = {"since": f"{self._since:.6f}"} \
            if self._since is not None and self.last_event_id is None else None
        return Req("GET", "/events", headers=events_headers(self.last_event_id), params=params,
                   timeout=httpx.Timeout(read, connect=10.0))

    def _arm(self) -> None:
        self._deadline = None if self._timeout is None else time.monotonic() + self._timeout

    def _expired(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _accept(self, e: Event) -> bool:
        if e.get("id") is not None:
            self.last_event_id = e["id"]
        if self._since is not None and float(e.get("timestamp") or 0) < self._since:
            return False
        return event_matches(e, self._sandbox, self._types)

    def _feed(self, parser: SSEParser, line: str) -> Optional[Event]:
        """One SSE line: the event to yield, if it completes one that is wanted."""
        e = parser.feed(line)
        if e is not None and self._accept(e):
            self._arm()
            return e
        return None

    def _count(self) -> bool:
        """An event was yielded: True once max_events are reached."""
        if self._left is None:
            return False
        self._left -= 1
        return self._left == 0

    def _failed(self, e: BaseException) -> bool:
        """The connection failed with ``e`` (one of _FAILURES): True to end the iteration,
        False to reconnect; raises when it may not reconnect."""
        if isinstance(e, httpx.ReadTimeout):
            if self._timeout is not None:
                return True  # nothing within the timeout
            if not self._reconnect:
                raise Timeout("no event and no heartbeat for 60 s") from None
            return False
        if isinstance(e, Timeout) and self._timeout is not None:
            return True
        if not self._reconnect or self._closed:
            if isinstance(e, httpx.TransportError):
                raise transport_error(e) from e
            raise e
        return False


#: What makes an event stream reconnect (or end, or raise: see _EventsBase._failed).
_FAILURES = (httpx.TransportError, StreamError, ServiceUnavailable, ConnectionFailed)


def _ended() -> StreamError:
    return StreamError(0, "stream_ended", "the event stream ended")


class EventStream(_EventsBase):
    """Events of the caller's sandboxes, as they happen (Server-Sent Events)::

        for ev in client.events(timeout=30):
            print(ev.id, ev.type, ev.container_id, ev.data)

    After a dropped connection it reconnects with ``Last-Event-ID`` (``reconnect=True``) so
    nothing is lost or repeated; ``last_event_id`` always holds the id to resume from.
    Without ``last_event_id`` the stream starts with the oldest recorded event; ``since``
    (a Unix time, e.g. ``time.time()``) skips events older than it.
    ``timeout``: stop (end the iteration) when no event came for about that many seconds
    (checked at least every 15 s, the daemon's heartbeat). ``max_events``: stop after that
    many. Without either it runs until ``close()``.
    """

    _iter: Optional[Generator[Event, None, None]] = None

    def _gen(self) -> Generator[Event, None, None]:
        self._arm()
        backoff = 0.2
        try:
            while not self._closed and self._left != 0:
                try:
                    resp = self._resp = self._client._open(self._req())
                    parser = SSEParser()
                    for line in resp.iter_lines():
                        backoff = 0.2
                        e = self._feed(parser, line)
                        if e is not None:
                            yield e
                            if self._count():
                                return
                        if self._expired():
                            return
                    raise _ended()
                except _FAILURES as e:
                    if self._failed(e):
                        return
                finally:
                    self._close_resp()
                if self._expired():
                    return
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
        finally:
            self._close_resp()

    def _close_resp(self) -> None:
        r, self._resp = self._resp, None
        if r is not None:
            r.close()

    def __iter__(self) -> Iterator[Event]:
        if self._iter is None:
            self._iter = self._gen()
        return self._iter

    def __next__(self) -> Event:
        return next(iter(self))

    def close(self) -> None:
        self._closed = True
        self._close_resp()
        if self._iter is not None:
            self._iter.close()

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncEventStream(_EventsBase):
    """``async for ev in client.events(...)`` — see :class:`EventStream`."""

    _it: Optional[AsyncIterator[Event]] = None

    async def _gen(self) -> AsyncIterator[Event]:
        import asyncio
        self._arm()
        backoff = 0.2
        try:
            while not self._closed and self._left != 0:
                try:
                    resp = self._resp = await self._client._aopen(self._req())
                    parser = SSEParser()
                    async for line in resp.aiter_lines():
                        backoff = 0.2
                        e = self._feed(parser, line)
                        if e is not None:
                            yield e
                            if self._count():
                                return
                        if self._expired():
                            return
                    raise _ended()
                except _FAILURES as e:
                    if self._failed(e):
                        return
                finally:
                    await self._close_resp()
                if self._expired():
                    return
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
        finally:
            await self._close_resp()

    async def _close_resp(self) -> None:
        r, self._resp = self._resp, None
        if r is not None:
            await r.aclose()

    def __aiter__(self) -> "AsyncEventStream":
        return self

    async def __anext__(self) -> Event:
        if self._it is None:
            self._it = self._gen()
        return await self._it.__anext__()

    async def aclose(self) -> None:
        self._closed = True
        await self._close_resp()
        if self._it is not None:
            await self._it.aclose()  # type: ignore[attr-defined]

    async def __aenter__(self) -> "AsyncEventStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

