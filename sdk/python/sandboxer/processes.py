"""Background processes: started in a sandbox and owned by it (its agent keeps them and the
last 1 MiB of each one's output), so they outlive the request that started them and go
through a fork, a hibernation or a daemon restart. A handle reaches one:
:class:`Process` (blocking methods, and the same as coroutines with an ``a`` prefix) and
:class:`AsyncProcess` (every method a coroutine)::

    p = sb.start_process("python3 server.py", tag="web")
    for chunk in p.iter_output():          # follows until it exits, resuming by cursor
        print(chunk.stream, chunk.data, end="")
    p.wait()                               # its exit code

Output is addressed by cursors: absolute byte offsets in everything the process wrote
(stdout and stderr together). Each chunk says where it ends, so a reader that lost its
connection (or a daemon that restarted) goes on from there, missing nothing and seeing
nothing twice; ``iter_output`` does that by itself.
"""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any, AsyncIterator, Dict, Iterator, List, Mapping, Optional, Union

import httpx

from . import _base as B
from .errors import ConnectionFailed, ServiceUnavailable, StreamError, Timeout
from .models import Model

__all__ = ["Process", "AsyncProcess", "OutputChunk", "ProcessOutput"]

#: The fields of a process record, readable as attributes.
FIELDS = ("pid", "argv", "argv_truncated", "command", "tag", "tty", "stdin", "status",
          "exit_code", "signal", "started_at", "ended_at", "output_start", "output_end")

#: Following output: what makes it reconnect from its cursor.
_FAILURES = (httpx.TransportError, StreamError, ServiceUnavailable, ConnectionFailed)
_RETRIES = 60  # reconnections in a row without progress before giving up (~1-2 min)
_READ_TIMEOUT = 60.0  # the daemon sends a line at least every 15 s


class OutputChunk(Model):
    """A piece of a process's output: ``stream`` ("stdout", "stderr", or "dropped" when
    older output was no longer kept: then ``bytes`` says how much and ``data`` is empty),
    ``data`` (text; bytes that are not UTF-8 are replaced) and ``cursor``, the offset just
    after it: where to resume."""

    stream: str
    data: str
    cursor: int
    bytes: int


class ProcessOutput(Model):
    """One read of a process's output (GET .../output): ``{pid, start, dropped,
    next_cursor, done, chunks: [{stream, data, cursor}], process}``."""

    pid: int
    start: int
    dropped: int
    next_cursor: int
    done: bool
    chunks: List[Dict[str, Any]]
    process: Dict[str, Any]

    @property
    def stdout(self) -> str:
        return "".join(c["data"] for c in self.get("chunks", []) if c["stream"] == "stdout")

    @property
    def stderr(self) -> str:
        return "".join(c["data"] for c in self.get("chunks", []) if c["stream"] == "stderr")


# ---- requests ----

def _path(sid: str, pid: Optional[int] = None, tail: str = "") -> str:
    p = f"/sandboxes/{B.q(sid)}/processes"
    return p if pid is None else f"{p}/{int(pid)}{tail}"


def start_body(command: B.Command, env: Optional[Mapping[str, str]], cwd: Optional[str],
               user: Optional[str], stdin: Union[bool, str, bytes, None], tty: bool,
               cols: Optional[int], rows: Optional[int], tag: Optional[str]) -> Dict[str, Any]:
    """A string is shell code (``code``), a list an argv."""
    if isinstance(command, str):
        body: Dict[str, Any] = {"code": command}
    elif isinstance(command, (bytes, bytearray)):
        raise TypeError("command must be str (shell code) or a list of str (argv)")
    else:
        body = {"argv": [str(a) for a in command]}
    if isinstance(stdin, (bytes, bytearray)):
        stdin = bytes(stdin).decode("utf-8")
    body.update(B.drop_none({"cwd": cwd, "user": user, "stdin": stdin, "cols": cols,
                             "rows": rows, "tag": tag}))
    if tty:
        body["tty"] = True
    if env is not None:
        body["env"] = {str(k): str(v) for k, v in dict(env).items()}
    return body


def op_start(sid: str, body: Dict[str, Any]) -> B.Req:
    return B.Req("POST", _path(sid), json=body)


def op_list(sid: str) -> B.Req:
    return B.Req("GET", _path(sid), parse=lambda r: r.json().get("processes", []))


def op_get(sid: str, pid: int) -> B.Req:
    return B.Req("GET", _path(sid, pid))


def op_output(sid: str, pid: int, cursor: int, limit: Optional[int]) -> B.Req:
    return B.Req("GET", _path(sid, pid, "/output"), params={"cursor": cursor, "limit": limit},
                 parse=lambda r: ProcessOutput(r.json()))


def op_follow(sid: str, pid: int, cursor: int, read_timeout: float) -> B.Req:
    return B.Req("GET", _path(sid, pid, "/output"), params={"cursor": cursor, "stream": True},
                 headers={"Accept": "application/x-ndjson"},
                 timeout=httpx.Timeout(read_timeout, connect=10.0))


def op_stdin(sid: str, pid: int, data: Union[str, bytes], eof: bool) -> B.Req:
    content = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    return B.Req("POST", _path(sid, pid, "/stdin"), content=content,
                 params={"eof": True if eof else None},
                 headers={"Content-Type": "application/octet-stream"})


def op_signal(sid: str, pid: int, sig: Union[int, str]) -> B.Req:
    return B.Req("POST", _path(sid, pid, "/signal"),
                 json={"signal": sig if isinstance(sig, int) else str(sig)})


def op_resize(sid: str, pid: int, cols: int, rows: int) -> B.Req:
    return B.Req("PATCH", _path(sid, pid), json={"cols": int(cols), "rows": int(rows)})


def op_delete(sid: str, pid: int) -> B.Req:
    return B.Req("DELETE", _path(sid, pid))


# ---- handles ----

class _Follow:
    """The state of one follow: the cursor to resume from, the deadline, the retries."""

    def __init__(self, cursor: int, timeout: Optional[float]) -> None:
        self.cursor = cursor
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.tries = 0
        self.backoff = 0.2

    def read_timeout(self) -> float:
        if self.deadline is None:
            return _READ_TIMEOUT
        return max(0.05, min(_READ_TIMEOUT, self.deadline - time.monotonic()))

    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def failed(self, e: BaseException, reconnect: bool) -> float:
        """After a failure: how long to sleep before reconnecting; raises when it may not."""
        if self.expired():
            raise Timeout("the process did not end in time") from None
        self.tries += 1
        if not reconnect or self.tries > _RETRIES:
            if isinstance(e, httpx.TransportError):
                raise B.transport_error(e) from e
            raise e
        delay, self.backoff = self.backoff, min(self.backoff * 2, 2.0)
        return delay


class _ProcessBase:
    """A background process as the daemon last described it, plus what acts on it.

    The record's fields read as attributes (``p.pid``, ``p.status``, ``p.exit_code``,
    ``p.output_end``...); ``p.data`` is the whole record. ``p.sandbox_id`` names its
    sandbox.
    """

    pid: int
    status: str
    exit_code: Optional[int]
    signal: Optional[int]
    command: str
    tag: Optional[str]
    tty: bool
    output_start: int
    output_end: int

    def __init__(self, client: Any, sandbox_id: str, data: Mapping[str, Any]) -> None:
        object.__setattr__(self, "client", client)
        object.__setattr__(self, "sandbox_id", sandbox_id)
        object.__setattr__(self, "_data", dict(data))

    @property
    def data(self) -> Dict[str, Any]:
        d: Dict[str, Any] = self._data
        return d

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        data = self.__dict__.get("_data", {})
        if name in data:
            return data[name]
        if name in FIELDS:
            return None
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {self.pid} in {str(self.sandbox_id)[:12]} "
                f"status={self.status!r} command={self.command!r}>")

    @property
    def running(self) -> bool:
        return self.status == "running"

    def _merge(self, record: Mapping[str, Any]) -> Any:
        if isinstance(record, Mapping):
            self._data.update(record)
        return self

    def _line(self, line: str, f: _Follow) -> Optional[OutputChunk]:
        """One ndjson line of the follow stream: a chunk to yield, or None; an exit line
        updates the record and ends the follow (StopIteration is the caller's: f.cursor
        is None); an error line raises."""
        line = line.strip()
        if not line:
            return None
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise StreamError(0, "bad_stream", f"not JSON in the output stream: {line[:200]!r}") \
                from e
        f.tries, f.backoff = 0, 0.2
        kind = obj.get("type")
        if isinstance(obj.get("cursor"), int):
            f.cursor = obj["cursor"]
        if kind in ("stdout", "stderr"):
            return OutputChunk(stream=kind, data=obj.get("output", ""), cursor=f.cursor, bytes=0)
        if kind == "dropped":
            return OutputChunk(stream="dropped", data="", cursor=f.cursor,
                               bytes=int(obj.get("bytes", 0)))
        if kind == "exit":
            self._data.update(status="exited", exit_code=obj.get("exit_code"),
                              signal=obj.get("signal"), output_end=f.cursor)
            f.cursor = -1
        elif kind == "error":
            raise _StreamFatal(StreamError(0, str(obj.get("code") or "follow_error"),
                                           str(obj.get("output") or "")))
        return None  # waiting, ping, and kinds this client does not know yet


class _StreamFatal(Exception):
    """An error line: not a broken connection, so no reconnecting."""

    def __init__(self, error: StreamError) -> None:
        super().__init__(str(error))
        self.error = error


# ---- the coroutines: AsyncProcess's methods, and Process's a-prefixed ones. They call no
# method through the handle by name (on a Process those names are the blocking ones).

async def _arefresh(p: _ProcessBase) -> Any:
    """Fetch the record again (wakes a hibernated sandbox); returns the handle."""
    return p._merge(await p.client._acall(op_get(p.sandbox_id, p.pid)))


async def _aread_output(p: _ProcessBase, cursor: int = 0,
                        limit: Optional[int] = None) -> ProcessOutput:
    """What is kept of its output from ``cursor`` on, without waiting."""
    out: ProcessOutput = await p.client._acall(op_output(p.sandbox_id, p.pid, cursor, limit))
    p._merge(out.get("process", {}))
    return out


async def _aiter_output(p: _ProcessBase, cursor: int = 0, *, reconnect: bool = True,
                        timeout: Optional[float] = None) -> AsyncIterator[OutputChunk]:
    """Its output from ``cursor`` on as it comes, until it exits, resuming by cursor."""
    f = _Follow(cursor, timeout)
    while f.cursor >= 0:
        try:
            resp = await p.client._aopen(op_follow(p.sandbox_id, p.pid, f.cursor,
                                                   f.read_timeout()))
            try:
                async for line in resp.aiter_lines():
                    chunk = p._line(line, f)
                    if chunk is not None:
                        yield chunk
                    if f.cursor < 0:
                        return
            finally:
                await resp.aclose()
            raise StreamError(0, "stream_ended", "the output stream ended before the exit")
        except _StreamFatal as e:
            raise e.error from None
        except _FAILURES as e:
            delay = f.failed(e, reconnect)
        await asyncio.sleep(delay)


async def _await(p: _ProcessBase, timeout: Optional[float] = None) -> int:
    """Wait until it exits (without waking a hibernated sandbox); its exit code."""
    if p.status != "exited":
        async for _ in _aiter_output(p, p.output_end or 0, timeout=timeout):
            pass
    return int(p.exit_code)


async def _asend_stdin(p: _ProcessBase, data: Union[str, bytes], eof: bool = False) -> Any:
    """Write to its stdin (at most 256 KiB a call); ``eof=True`` then closes it."""
    return p._merge(await p.client._acall(op_stdin(p.sandbox_id, p.pid, data, eof)))


async def _aclose_stdin(p: _ProcessBase) -> Any:
    """Close its stdin (a PTY process: type ^D)."""
    return await _asend_stdin(p, b"", eof=True)


async def _asignal(p: _ProcessBase, sig: Union[int, str] = "TERM") -> Any:
    """Send its process group a signal: a number or a name ("TERM", "SIGINT"...)."""
    return p._merge(await p.client._acall(op_signal(p.sandbox_id, p.pid, sig)))


async def _aterminate(p: _ProcessBase) -> Any:
    """SIGTERM to its group."""
    return await _asignal(p, "TERM")


async def _akill(p: _ProcessBase, sig: Union[int, str] = "KILL") -> Any:
    """Kill it (SIGKILL to its group); its record stays."""
    return await _asignal(p, sig)


async def _aresize(p: _ProcessBase, cols: int, rows: int) -> Any:
    """The size of its terminal (a PTY process)."""
    return p._merge(await p.client._acall(op_resize(p.sandbox_id, p.pid, cols, rows)))


async def _adelete(p: _ProcessBase) -> None:
    """Kill its group if it runs and forget it (record and output)."""
    await p.client._acall(op_delete(p.sandbox_id, p.pid))


class AsyncProcess(_ProcessBase):
    """A background process, every method a coroutine (see :class:`Process`; ``iter_output``
    is an async iterator)."""

    refresh = _arefresh
    read_output = _aread_output
    iter_output = _aiter_output
    wait = _await
    send_stdin = _asend_stdin
    close_stdin = _aclose_stdin
    send_signal = _asignal
    terminate = _aterminate
    kill = _akill
    resize = _aresize
    delete = _adelete


class Process(_ProcessBase):
    """A background process of a sandbox (``sb.start_process(...)``, ``sb.processes()``,
    ``sb.process(pid)``). Blocking methods; the same as coroutines with an ``a`` prefix."""

    def refresh(self) -> "Process":
        """Fetch the record again (wakes a hibernated sandbox); returns self."""
        return self._merge(self.client._call(op_get(self.sandbox_id, self.pid)))

    def read_output(self, cursor: int = 0, limit: Optional[int] = None) -> ProcessOutput:
        """What is kept of its output from ``cursor`` on (at most ``limit`` bytes, default
        256 KiB), without waiting: a :class:`ProcessOutput` (``chunks``, ``next_cursor``,
        ``dropped``, ``done``, ``stdout``, ``stderr``)."""
        out: ProcessOutput = self.client._call(op_output(self.sandbox_id, self.pid, cursor, limit))
        self._merge(out.get("process", {}))
        return out

    def output(self) -> ProcessOutput:
        """All of the output still kept (every page up to now), as one ProcessOutput."""
        first = self.read_output(0, 1 << 20)
        chunks, cursor = list(first.chunks), first.next_cursor
        while True:
            page = self.read_output(cursor, 1 << 20)
            if page.next_cursor == cursor:
                break
            chunks += page.chunks
            cursor = page.next_cursor
        return ProcessOutput(dict(first, chunks=chunks, next_cursor=cursor, done=page.done,
                                  process=page.process))

    def iter_output(self, cursor: int = 0, *, reconnect: bool = True,
                    timeout: Optional[float] = None) -> Iterator[OutputChunk]:
        """Its output from ``cursor`` on as it comes (:class:`OutputChunk` objects), until it
        exits (then ``status`` and ``exit_code`` are set). When the stream breaks off (the
        network, a daemon restart) it reconnects from the last chunk's cursor, so nothing is
        lost or repeated; while the sandbox is hibernated it waits without waking it.
        ``timeout``: raise :class:`~sandboxer.Timeout` if it has not exited by then."""
        f = _Follow(cursor, timeout)
        while f.cursor >= 0:
            try:
                resp = self.client._open(
                    op_follow(self.sandbox_id, self.pid, f.cursor, f.read_timeout()))
                try:
                    for line in resp.iter_lines():
                        chunk = self._line(line, f)
                        if chunk is not None:
                            yield chunk
                        if f.cursor < 0:
                            return
                finally:
                    resp.close()
                raise StreamError(0, "stream_ended", "the output stream ended before the exit")
            except _StreamFatal as e:
                raise e.error from None
            except _FAILURES as e:
                delay = f.failed(e, reconnect)
            time.sleep(delay)

    def wait(self, timeout: Optional[float] = None) -> int:
        """Wait until it exits; its exit code (128 + the signal when one killed it). It
        follows the output from the end known, resuming after a broken connection; a
        hibernated sandbox is waited for, not woken. :class:`~sandboxer.Timeout` after
        ``timeout`` seconds."""
        if self.status == "exited":
            return int(self.exit_code)
        for _ in self.iter_output(self.output_end or 0, timeout=timeout):
            pass
        return int(self.exit_code)

    def send_stdin(self, data: Union[str, bytes], eof: bool = False) -> "Process":
        """Write to its stdin (at most 256 KiB a call); ``eof=True`` then closes it (a PTY
        process: types ^D). Needs ``stdin=True`` at start (a PTY always takes input)."""
        return self._merge(self.client._call(op_stdin(self.sandbox_id, self.pid, data, eof)))

    def close_stdin(self) -> "Process":
        return self.send_stdin(b"", eof=True)

    def send_signal(self, sig: Union[int, str]) -> "Process":
        """Send its process group a signal: a number or a name ("TERM", "SIGINT"...).
        (``p.signal`` is the record's: the signal that ended it.)"""
        return self._merge(self.client._call(op_signal(self.sandbox_id, self.pid, sig)))

    def terminate(self) -> "Process":
        """SIGTERM to its group."""
        return self.send_signal("TERM")

    def kill(self, sig: Union[int, str] = "KILL") -> "Process":
        """Kill it (SIGKILL to its group, unless ``sig`` says otherwise); its record stays,
        ``wait()`` then gives 137."""
        return self.send_signal(sig)

    def resize(self, cols: int, rows: int) -> "Process":
        """The size of its terminal (a PTY process)."""
        return self._merge(self.client._call(op_resize(self.sandbox_id, self.pid, cols, rows)))

    def delete(self) -> None:
        """Kill its group if it runs and forget it (record and output)."""
        self.client._call(op_delete(self.sandbox_id, self.pid))

    # the coroutine variants (await_exit is wait's: "await" is a keyword)
    arefresh = _arefresh
    aread_output = _aread_output
    aiter_output = _aiter_output
    await_exit = _await
    asend_stdin = _asend_stdin
    aclose_stdin = _aclose_stdin
    asend_signal = _asignal
    aterminate = _aterminate
    akill = _akill
    aresize = _aresize
    adelete = _adelete
