"""Sandbox handles: :class:`Sandbox` (sync methods, and the same with an ``a`` prefix as
coroutines) and :class:`AsyncSandbox` (every method a coroutine, from ``AsyncSandboxer``)."""
from __future__ import annotations

import asyncio
import os
import time
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence,
                    TypeVar, Union)

import httpx

from . import _base as B
from .errors import NotFound, SandboxerError, Timeout
from . import processes as P
from .models import (ExecResult, Execution, ExecutionLogPage, FileInfo, Snapshot, Tree)
from .processes import AsyncProcess, Process
from .streams import (AsyncByteStream, AsyncEventStream, AsyncExecStream, AsyncTextStream,
                      ByteStream, EventStream, ExecStream, TextStream)
from .terminal import Terminal

if TYPE_CHECKING:  # pragma: no cover
    from .client import AsyncSandboxer, Sandboxer

__all__ = ["Sandbox", "AsyncSandbox", "SandboxBase"]

S = TypeVar("S", bound="SandboxBase")

#: The fields of a sandbox object (GET /sandboxes/{id}), readable as attributes.
FIELDS = ("id", "name", "label", "image", "status", "exit_code", "hostname", "ip_address",
          "parent_id", "child_ids", "created_at", "last_active_at", "deleted_at",
          "delete_reason", "is_public", "interactive", "url", "resources", "runtime",
          "network", "egress_allow", "net_raw", "memory_preserved", "message",
          "terminated_sandboxes", "last_error", "template", "setuid")

#: Statuses after which a sandbox will not run again on its own.
DONE = ("exited", "terminated")


class SandboxBase:
    """A sandbox as the daemon last described it, plus the client to act on it.

    The sandbox object's fields read as attributes (``sb.id``, ``sb.status``, ``sb.label``,
    ``sb.resources``...; a field the answer lacked reads as None); ``sb.data`` is the whole
    JSON object. ``refresh()`` fetches it again; state-changing calls update ``status``.
    """

    id: str
    name: str
    label: str
    image: str
    status: str
    exit_code: Optional[int]
    hostname: str
    ip_address: Optional[str]
    parent_id: Optional[str]
    child_ids: List[str]
    created_at: float
    last_active_at: float
    deleted_at: Optional[float]
    delete_reason: Optional[str]
    is_public: bool
    interactive: bool
    url: Optional[str]
    resources: Dict[str, Any]
    runtime: str
    memory_preserved: Optional[bool]
    #: Why the last change failed or fell back while the sandbox kept working (a wake that
    #: could not restore memory, an idle hibernation that failed): {op, detail, at} or None.
    last_error: Optional[Dict[str, Any]]
    message: Optional[str]
    terminated_sandboxes: Optional[List[str]]

    def __init__(self, client: Any, id: Optional[str] = None, label: Optional[str] = None,
                 image: Optional[str] = None, interactive: bool = False, **kwargs: Any) -> None:
        object.__setattr__(self, "client", client)
        data: Dict[str, Any] = dict(kwargs)
        data.update({"id": id, "interactive": interactive})
        if label is not None or "label" not in data:
            data["label"] = label
        if image is not None or "image" not in data:
            data["image"] = image
        object.__setattr__(self, "_data", data)

    @property
    def data(self) -> Dict[str, Any]:
        """The sandbox object as last received."""
        data: Dict[str, Any] = self._data
        return data

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        data = self.__dict__.get("_data", {})
        if name in data:
            return data[name]
        if name in FIELDS:
            return None
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in FIELDS:
            self._data[name] = value
        else:
            object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {str(self.id)[:12]} label={self.label!r} "
                f"image={self.image!r} status={self.status!r}>")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SandboxBase):
            return bool(self.id == other.id)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.id)

    def _merge(self, data: Mapping[str, Any]) -> None:
        self._data.update(data)

    def _status(self, answer: Dict[str, Any]) -> Dict[str, Any]:
        if isinstance(answer, dict) and "status" in answer:
            self._data["status"] = answer["status"]
        return answer

    def _child(self: S, data: Mapping[str, Any]) -> S:
        return type(self)(self.client, **dict(data))

    # ---- things that need no request ----

    def proxy_url(self, path: str = "/", port: Optional[int] = None) -> str:
        """The URL of ``path`` on this sandbox's HTTP server through the daemon's proxy
        (``{base}/sandboxes/{id}/proxy/{path}``). Needs the token unless the sandbox is
        public; over a unix socket it is only meaningful to this client."""
        url: str = self.client.base_url + B.proxy_path(self.id, path)
        return url + (f"?port={int(port)}" if port is not None else "")

    def _proxy_kwargs(self, path: str, port: Optional[int],
                      kw: Dict[str, Any]) -> Dict[str, Any]:
        if port is not None:
            params = dict(kw.pop("params", None) or {})
            params["port"] = int(port)
            kw["params"] = params
        kw.setdefault("timeout", B.make_timeout(60.0))
        return kw

    def _terminal(self, route: str, query: Dict[str, Any], timeout: float) -> Terminal:
        url = B.ws_url(self.client.base_url, f"/sandboxes/{B.q(self.id)}/{route}", query)
        return Terminal.connect(url, self.client.token, self.client.socket, timeout)

    @staticmethod
    def _pty_query(cmd: Optional[str], cols: int, rows: int, term: Optional[str],
                   cwd: Optional[str], user: Optional[str]) -> Dict[str, Any]:
        return {"cmd": cmd, "cols": cols, "rows": rows, "term": term, "cwd": cwd, "user": user}


def _statuses(status: Union[str, Iterable[str]]) -> Sequence[str]:
    return (status,) if isinstance(status, str) else tuple(status)


class _AsyncOps(SandboxBase):
    """The coroutine implementations. AsyncSandbox has them under these names; Sandbox has
    them with an ``a`` prefix. They call no other method through ``self`` by name."""

    async def refresh(self: S) -> S:
        """Fetch the sandbox object again; returns self."""
        self._merge(await self.client._acall(B.op_get(self.id)))
        return self

    async def update(self: SandboxBase, label: Optional[str] = None,
                     public: Optional[bool] = None) -> Dict[str, Any]:
        """Change the label and/or whether the proxy serves without a token."""
        out = await self.client._acall(B.op_update(self.id, label, public))
        if "label" in out:
            self._data["label"] = out["label"]
        if "public" in out:
            self._data["is_public"] = out["public"]
        return out  # type: ignore[no-any-return]

    async def set_label(self: SandboxBase, label: str) -> Dict[str, Any]:
        return await _AsyncOps.update(self, label=label)

    async def set_public(self: SandboxBase, public: bool = True) -> Dict[str, Any]:
        return await _AsyncOps.update(self, public=public)

    async def terminate(self: SandboxBase) -> Dict[str, Any]:
        """Delete the sandbox: kill it, remove its container and storage (the record
        stays, status ``terminated``). Deleting an already deleted sandbox is fine."""
        return self._status(await self.client._acall(B.op_delete(self.id)))

    delete = terminate

    async def exec(self: SandboxBase, command: B.Command, *,
                   env: Optional[Mapping[str, str]] = None,
                   cwd: Optional[str] = None, user: Optional[str] = None,
                   stdin: Union[str, bytes, None] = None, timeout: Optional[float] = None,
                   check: bool = False) -> ExecResult:
        """Run a command and wait for it. A string is shell code (``sh -c``), a list an
        argv. See :meth:`Sandbox.exec`."""
        r: ExecResult = await self.client._acall(B.exec_req(
            command, env=env, cwd=cwd, user=user, stdin=stdin, timeout=timeout, sid=self.id))
        return r.check() if check else r

    async def execute(self: SandboxBase, code: str, *, timeout: Optional[float] = None,
                      check: bool = False) -> ExecResult:
        """Run shell code with ``sh -c`` (POST /execute)."""
        r: ExecResult = await self.client._acall(B.exec_req(str(code), timeout=timeout,
                                                            sid=self.id))
        return r.check() if check else r

    def exec_stream(self: SandboxBase, command: B.Command, *,
                    env: Optional[Mapping[str, str]] = None,
                    cwd: Optional[str] = None, user: Optional[str] = None,
                    stdin: Union[str, bytes, None] = None,
                    timeout: Optional[float] = None) -> AsyncExecStream:
        """``async for chunk in sb.exec_stream(cmd)`` — see :class:`AsyncExecStream`."""
        return AsyncExecStream(self.client, B.exec_req(
            command, env=env, cwd=cwd, user=user, stdin=stdin, timeout=timeout, stream=True,
            sid=self.id))

    async def output(self: SandboxBase) -> str:
        """The main process's output so far (stdout and stderr, as text)."""
        return await self.client._acall(B.op_output(self.id, False))  # type: ignore

    def follow_output(self: SandboxBase) -> AsyncTextStream:
        """The main process's output, followed until it exits."""
        return AsyncTextStream(self.client, B.op_output(self.id, True))

    async def logs(self: SandboxBase, limit: int = 1000) -> Dict[str, Any]:
        """Execution history with output, oldest first: ``{"executions": [...]}``."""
        return await self.client._acall(B.op_execution_logs(self.id, limit))  # type: ignore

    async def executions(self: SandboxBase, limit: Optional[int] = None,
                         newest_first: bool = False) -> List[Execution]:
        """The recorded executions (each with its output) as Execution objects."""
        return await self.client._acall(  # type: ignore[no-any-return]
            B.op_executions(self.id, limit, newest_first))

    async def execution_logs(self: SandboxBase, execution_id: int, start_id: Optional[int] = None,
                             limit: Optional[int] = None) -> ExecutionLogPage:
        """One execution's output after ``start_id``; tail with ``page.next_start_id``."""
        return await self.client._acall(  # type: ignore[no-any-return]
            B.op_execution_page(self.id, execution_id, start_id, limit))

    async def start_process(self: SandboxBase, command: B.Command, *,
                            env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
                            user: Optional[str] = None, stdin: Union[bool, str, bytes, None] = None,
                            tty: bool = False, cols: Optional[int] = None,
                            rows: Optional[int] = None, tag: Optional[str] = None) -> AsyncProcess:
        """Start a background process, owned by the sandbox. See :meth:`Sandbox.start_process`."""
        data = await self.client._acall(P.op_start(self.id, P.start_body(
            command, env, cwd, user, stdin, tty, cols, rows, tag)))
        return AsyncProcess(self.client, self.id, data)

    async def processes(self: SandboxBase) -> List[AsyncProcess]:
        """The sandbox's background processes, oldest first."""
        return [AsyncProcess(self.client, self.id, d)
                for d in await self.client._acall(P.op_list(self.id))]

    async def process(self: SandboxBase, pid: int) -> AsyncProcess:
        """The background process ``pid`` (:class:`~sandboxer.NotFound` if there is none)."""
        return AsyncProcess(self.client, self.id, await self.client._acall(P.op_get(self.id, pid)))

    async def fork(self: S, label: Optional[str] = None,
                   hostname: Optional[str] = None) -> S:
        """A child sandbox with this one's processes, memory and files (``memory_preserved``
        says whether memory came along)."""
        data = await self.client._acall(B.op_fork(self.id, label, hostname))
        child = self._child(data)
        ids = self._data.get("child_ids")
        if isinstance(ids, list) and child.id not in ids:
            ids.append(child.id)
        return child

    async def stats(self: SandboxBase) -> Dict[str, Any]:
        """What it uses now: ``{cpu, memory, pids, disk, network}`` (never wakes it)."""
        return await self.client._acall(B.op_stats(self.id))  # type: ignore[no-any-return]

    async def tree(self: SandboxBase, dead_prefix: str = "") -> Tree:
        """This sandbox's fork tree (from its root): ``tree.text`` and ``tree.root``."""
        return await self.client._acall(B.op_tree(self.id))  # type: ignore[no-any-return]

    async def coalesce(self: S, final: Any) -> S:
        """Keep ``final`` (a descendant of this sandbox), delete the rest of this subtree.
        Returns the kept sandbox (with ``message`` and ``terminated_sandboxes``)."""
        data = await self.client._acall(B.op_coalesce(self.id, B.sid_of(final)))
        if isinstance(final, SandboxBase):
            final._merge(data)
        if self.id in (data.get("terminated_sandboxes") or []):
            self._data["status"] = "terminated"
        return self._child(data)

    async def pause(self: SandboxBase) -> Dict[str, Any]:
        """Freeze every process (cgroup freezer); execs get 409 until unpause()."""
        return self._status(await self.client._acall(B.op_pause(self.id, True)))

    async def unpause(self: SandboxBase) -> Dict[str, Any]:
        return self._status(await self.client._acall(B.op_pause(self.id, False)))

    async def hibernate(self: SandboxBase) -> Dict[str, Any]:
        """Checkpoint the processes to disk and free the memory; an exec or wake()
        restores them where they were."""
        return self._status(await self.client._acall(B.op_hibernate(self.id, False)))

    async def wake(self: SandboxBase, *, cold: bool = False) -> Dict[str, Any]:
        return self._status(await self.client._acall(B.op_hibernate(self.id, True, cold)))

    async def snapshot(self: SandboxBase, name: str) -> Snapshot:
        """Keep a named snapshot (files and memory) to start new sandboxes from."""
        return await self.client._acall(B.op_snapshot(self.id, name))  # type: ignore

    # ---- files ----

    async def read_file(self: SandboxBase, path: str, *, user: Optional[str] = None,
                        offset: Optional[int] = None, length: Optional[int] = None) -> bytes:
        """A file's bytes (``offset``/``length`` for a range; a negative offset counts from
        the end)."""
        return await self.client._acall(  # type: ignore[no-any-return]
            B.op_read_file(self.id, path, user, offset, length))

    async def read_text(self: SandboxBase, path: str, encoding: str = "utf-8", *,
                        user: Optional[str] = None) -> str:
        data = await self.client._acall(B.op_read_file(self.id, path, user, None, None))
        return data.decode(encoding)  # type: ignore[no-any-return]

    def iter_file(self: SandboxBase, path: str, chunk_size: Optional[int] = None, *,
                  user: Optional[str] = None) -> AsyncByteStream:
        """``async for chunk in sb.iter_file(path)``: a file streamed in chunks."""
        return AsyncByteStream(self.client, B.op_read_file(self.id, path, user, None, None),
                               path, chunk_size)

    async def write_file(self: SandboxBase, path: str, data: B.FileContent, *,
                         mode: Union[int, str, None] = None, mkdir: bool = False,
                         user: Optional[str] = None) -> Dict[str, Any]:
        """Write one file atomically from bytes, text, a binary file object or an
        (async) iterable of chunks. ``mode`` like 0o755 or "755"; ``mkdir`` makes parents."""
        return await self.client._acall(  # type: ignore[no-any-return]
            B.op_write_file(self.id, path, B.async_body(data), mode, mkdir, user))

    async def upload(self: SandboxBase, directory: str, files: B.UploadFiles, *,
                     user: Optional[str] = None) -> List[str]:
        """Upload several files into ``directory`` (one multipart request); returns the
        paths written. ``files``: local paths, ``(name, content)`` pairs or a dict."""
        parts, opened = B.upload_parts(files)
        try:
            return await self.client._acall(  # type: ignore[no-any-return]
                B.op_upload(self.id, directory, _read_parts(parts), user))
        finally:
            for f in opened:
                f.close()

    async def download(self: SandboxBase, path: str, local_path: Union[str, "os.PathLike[str]"], *,
                       user: Optional[str] = None) -> int:
        """Stream a file to a local path (written to a temporary name, then renamed).
        Returns the number of bytes."""
        stream = AsyncByteStream(self.client, B.op_read_file(self.id, path, user, None, None),
                                 path)
        return await _adownload(stream, local_path)

    async def list_files(self: SandboxBase, path: str = "/", *,
                         user: Optional[str] = None) -> List[FileInfo]:
        """A directory's entries."""
        return await self.client._acall(  # type: ignore[no-any-return]
            B.op_list_files(self.id, path, user))

    async def stat(self: SandboxBase, path: str, *, user: Optional[str] = None) -> FileInfo:
        return await self.client._acall(B.op_stat(self.id, path, user))  # type: ignore

    async def exists(self: SandboxBase, path: str, *, user: Optional[str] = None) -> bool:
        try:
            await self.client._acall(B.op_stat(self.id, path, user))
            return True
        except NotFound as e:
            if e.code == "sandbox_not_found":
                raise
            return False

    async def delete_file(self: SandboxBase, path: str, *, recursive: bool = False,
                          user: Optional[str] = None) -> Dict[str, Any]:
        """Remove a file or an empty directory (``recursive=True``: any directory)."""
        return await self.client._acall(  # type: ignore[no-any-return]
            B.op_delete_file(self.id, path, recursive, user))

    # ---- the proxy, waiting, events, terminals ----

    async def proxy(self: SandboxBase, method: str = "GET", path: str = "/",
                    port: Optional[int] = None, **kwargs: Any) -> httpx.Response:
        """An HTTP request to the sandbox's server through the daemon's proxy. Returns the
        raw ``httpx.Response`` (not raised on error statuses: it is the app's answer).
        ``kwargs`` go to httpx (``params``, ``json``, ``content``, ``headers``, ...)."""
        kw = self._proxy_kwargs(path, port, kwargs)
        try:
            r: httpx.Response = await self.client._async.request(
                method, B.proxy_path(self.id, path), **kw)
            return r
        except httpx.TransportError as e:
            raise B.transport_error(e) from e

    async def wait_for_http(self: SandboxBase, path: str = "/", port: Optional[int] = None,
                            timeout: float = 30.0, interval: float = 0.2) -> httpx.Response:
        """Poll the proxy until the sandbox's server answers (any status below 500);
        returns that response. Raises Timeout."""
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            try:
                r = await _AsyncOps.proxy(self, "GET", path, port,
                                          timeout=B.make_timeout(min(10.0, timeout)))
                if r.status_code < 500:
                    return r
                last = f"{r.status_code} {r.text[:200]}"
            except SandboxerError as e:
                last = str(e)
            if time.monotonic() >= deadline:
                raise Timeout(f"{path} did not answer within {timeout} s: {last}")
            await asyncio.sleep(interval)

    async def wait_for_status(self: S, status: Union[str, Iterable[str]] = DONE,
                              timeout: float = 60.0, interval: float = 0.1) -> S:
        """Poll until ``status`` (default: exited or terminated). Returns self."""
        want = _statuses(status)
        deadline = time.monotonic() + timeout
        while True:
            self._merge(await self.client._acall(B.op_get(self.id)))
            if self.status in want:
                return self
            if time.monotonic() >= deadline:
                raise Timeout(f"sandbox {self.id[:12]} is {self.status}, not {'/'.join(want)}, "
                              f"after {timeout} s")
            await asyncio.sleep(interval)

    wait = wait_for_status

    def events(self: SandboxBase, last_event_id: Optional[Union[int, str]] = None,
               types: Optional[Sequence[str]] = None, timeout: Optional[float] = None,
               reconnect: bool = True, max_events: Optional[int] = None,
               since: Optional[float] = None) -> AsyncEventStream:
        """This sandbox's events (``async for``) — see :class:`AsyncEventStream`."""
        return AsyncEventStream(self.client, last_event_id, self.id, types, timeout, reconnect,
                                max_events, since)

    async def pty(self: SandboxBase, cmd: Optional[str] = None, *, cols: int = 80, rows: int = 24,
                  term: Optional[str] = None, cwd: Optional[str] = None,
                  user: Optional[str] = None, timeout: float = 30.0) -> Terminal:
        """Open a shell (or ``cmd``) on a PTY; the Terminal itself is synchronous."""
        q = SandboxBase._pty_query(cmd, cols, rows, term, cwd, user)
        return await _in_thread(self._terminal, "exec/pty", q, timeout)

    async def attach(self: SandboxBase, *, timeout: float = 30.0) -> Terminal:
        """Attach to an interactive sandbox's console (see :meth:`Sandbox.attach`)."""
        return await _in_thread(self._terminal, "attach", {}, timeout)


async def _in_thread(fn: Callable[..., Terminal], *args: Any) -> Terminal:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, lambda: fn(*args))


def _read_parts(parts: List[Any]) -> List[Any]:
    """httpx's async client needs multipart contents in memory (bytes)."""
    out = []
    for field, (name, content) in parts:
        if hasattr(content, "read"):
            content = content.read()
        out.append((field, (name, content)))
    return out


def _tmp_name(local_path: Union[str, "os.PathLike[str]"]) -> str:
    p = os.fspath(local_path)
    d, n = os.path.split(p)
    return os.path.join(d, f".{n}.{os.getpid()}.part")


async def _adownload(stream: AsyncByteStream, local_path: Union[str, "os.PathLike[str]"]) -> int:
    tmp = _tmp_name(local_path)
    n = 0
    try:
        with open(tmp, "wb") as f:
            async for chunk in stream:
                f.write(chunk)
                n += len(chunk)
        os.replace(tmp, os.fspath(local_path))
    finally:
        await stream.aclose()
        if os.path.exists(tmp):
            os.unlink(tmp)
    return n


class AsyncSandbox(_AsyncOps):
    """A sandbox of an :class:`~sandboxer.AsyncSandboxer`: every method is a coroutine
    (streams are async iterators). ``async with`` deletes it at the end of the block."""

    client: "AsyncSandboxer"

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await _terminate_quietly(self)


async def _terminate_quietly(sb: SandboxBase) -> None:
    try:
        await _AsyncOps.terminate(sb)
    except NotFound:
        pass


class Sandbox(SandboxBase):
    """A sandbox of a :class:`~sandboxer.Sandboxer`.

    Every operation exists as a blocking method (``exec``, ``fork``, ...) and as a coroutine
    with an ``a`` prefix (``aexec``, ``afork``, ...). ``with`` (or ``async with``) deletes
    the sandbox at the end of the block.
    """

    client: "Sandboxer"

    # ---- lifecycle ----

    def refresh(self) -> "Sandbox":
        """Fetch the sandbox object again (status, exit_code, child_ids, ...); returns self."""
        self._merge(self.client._call(B.op_get(self.id)))
        return self

    def update(self, label: Optional[str] = None, public: Optional[bool] = None) -> Dict[str, Any]:
        """Change the label and/or ``public`` (the proxy then serves without a token).
        Returns what changed: ``{id, label?, public?}``."""
        out: Dict[str, Any] = self.client._call(B.op_update(self.id, label, public))
        if "label" in out:
            self._data["label"] = out["label"]
        if "public" in out:
            self._data["is_public"] = out["public"]
        return out

    def set_label(self, label: str) -> Dict[str, Any]:
        return self.update(label=label)

    def set_public(self, public: bool = True) -> Dict[str, Any]:
        return self.update(public=public)

    def terminate(self) -> Dict[str, Any]:
        """Delete the sandbox: kill it, remove its container and storage (the record stays,
        status ``terminated``). Deleting an already deleted sandbox is fine."""
        return self._status(self.client._call(B.op_delete(self.id)))

    delete = terminate

    # ---- running commands ----

    def exec(self, command: B.Command, *, env: Optional[Mapping[str, str]] = None,
             cwd: Optional[str] = None, user: Optional[str] = None,
             stdin: Union[str, bytes, None] = None, timeout: Optional[float] = None,
             check: bool = False) -> ExecResult:
        """Run a command and wait for it.

        ``command`` as a string is shell code run with ``sh -c`` (POST /execute); as a list
        it is an argv run directly (POST /exec). ``env``, ``cwd``, ``user`` (name or
        uid[:gid]) and ``stdin`` (text) apply to both (a string then runs as
        ``["/bin/sh", "-c", code]``). ``timeout`` (seconds): the daemon kills the command's
        process group past it and answers ``timed_out: true``. ``check=True`` raises
        :class:`~sandboxer.CommandFailed` on a non-zero exit.

        Returns an :class:`~sandboxer.ExecResult` — a dict ``{stdout, stderr, exit_code,
        truncated, timed_out, execution_id}`` with attribute access.
        """
        r: ExecResult = self.client._call(B.exec_req(
            command, env=env, cwd=cwd, user=user, stdin=stdin, timeout=timeout, sid=self.id))
        return r.check() if check else r

    def execute(self, code: str, *, timeout: Optional[float] = None,
                check: bool = False) -> ExecResult:
        """Run shell code with ``sh -c`` (POST /execute)."""
        r: ExecResult = self.client._call(B.exec_req(str(code), timeout=timeout, sid=self.id))
        return r.check() if check else r

    def exec_stream(self, command: B.Command, *, env: Optional[Mapping[str, str]] = None,
                    cwd: Optional[str] = None, user: Optional[str] = None,
                    stdin: Union[str, bytes, None] = None,
                    timeout: Optional[float] = None) -> ExecStream:
        """Run a command and yield its output as it comes: ExecChunk objects of type
        ``stdout``/``stderr``, then one ``exit``. ``stream.result`` holds the ExecResult
        afterwards (or call ``stream.collect()``). Arguments as for :meth:`exec`."""
        return ExecStream(self.client, B.exec_req(
            command, env=env, cwd=cwd, user=user, stdin=stdin, timeout=timeout, stream=True,
            sid=self.id))

    # ---- output and history ----

    def output(self) -> str:
        """The main process's output so far (stdout and stderr, as text)."""
        return self.client._call(B.op_output(self.id, False))  # type: ignore[no-any-return]

    def follow_output(self) -> TextStream:
        """The main process's output as it comes, until the process exits."""
        return TextStream(self.client, B.op_output(self.id, True))

    def logs(self, limit: int = 1000) -> Dict[str, Any]:
        """Execution history with output, oldest first, as the daemon answers it:
        ``{"executions": [{id, command, executed_at, exit_code, logs: [...]}]}``."""
        return self.client._call(B.op_execution_logs(self.id, limit))  # type: ignore

    def executions(self, limit: Optional[int] = None,
                   newest_first: bool = False) -> List[Execution]:
        """The recorded executions as Execution objects (``.command``, ``.exit_code``,
        ``.stdout``, ``.stderr``, ``.logs``)."""
        return self.client._call(  # type: ignore[no-any-return]
            B.op_executions(self.id, limit, newest_first))

    def execution_logs(self, execution_id: int, start_id: Optional[int] = None,
                       limit: Optional[int] = None) -> ExecutionLogPage:
        """One execution's output after ``start_id``; continue from ``page.next_start_id``."""
        return self.client._call(  # type: ignore[no-any-return]
            B.op_execution_page(self.id, execution_id, start_id, limit))

    # ---- fork, tree, coalesce, pause, hibernate, snapshots ----

    # ---- background processes ----

    def start_process(self, command: B.Command, *, env: Optional[Mapping[str, str]] = None,
                      cwd: Optional[str] = None, user: Optional[str] = None,
                      stdin: Union[bool, str, bytes, None] = None, tty: bool = False,
                      cols: Optional[int] = None, rows: Optional[int] = None,
                      tag: Optional[str] = None) -> Process:
        """Start a background process, owned by the sandbox (not by this call): it answers
        at once with a :class:`~sandboxer.Process` handle (``wait()``, ``iter_output()``,
        ``send_stdin()``, ``kill()``...). The process and the last 1 MiB of its output go
        through a fork, a hibernation or a daemon restart.

        ``command`` as a string is shell code (``sh -c``), as a list an argv run directly (a
        missing program gives a process that exited with 127). ``stdin``: ``True`` keeps a
        pipe to write with ``send_stdin``; text is written first and then closed (as
        ``exec``'s). ``tty=True`` runs it on a terminal (``cols`` x ``rows``). At most 64
        run at once per sandbox (:class:`~sandboxer.LimitExceeded`).
        """
        data = self.client._call(P.op_start(self.id, P.start_body(
            command, env, cwd, user, stdin, tty, cols, rows, tag)))
        return Process(self.client, self.id, data)

    def processes(self) -> List[Process]:
        """The sandbox's background processes, oldest first (running ones, and the last 64
        that ended)."""
        return [Process(self.client, self.id, d) for d in self.client._call(P.op_list(self.id))]

    def process(self, pid: int) -> Process:
        """The background process ``pid`` (:class:`~sandboxer.NotFound` if there is none)."""
        return Process(self.client, self.id, self.client._call(P.op_get(self.id, pid)))

    def fork(self, label: Optional[str] = None, hostname: Optional[str] = None) -> "Sandbox":
        """A child sandbox with this one's processes, memory, files and listening sockets.
        ``child.memory_preserved`` is False where CRIU could not carry the memory (then the
        child has the files and a fresh main process)."""
        child = self._child(self.client._call(B.op_fork(self.id, label, hostname)))
        ids = self._data.get("child_ids")
        if isinstance(ids, list) and child.id not in ids:
            ids.append(child.id)
        return child

    def stats(self) -> Dict[str, Any]:
        """What it uses now: ``{cpu: {usage_seconds, limit_cpus}, memory: {usage_bytes,
        limit_bytes, peak_bytes}, pids: {current, limit}, disk: {used_bytes, partial,
        limit_bytes}, network: {rx_bytes, tx_bytes}}``; a hibernated sandbox is not woken
        (then only ``disk`` is known)."""
        return self.client._call(B.op_stats(self.id))  # type: ignore[no-any-return]

    def tree(self, dead_prefix: str = "") -> Tree:
        """The fork tree this sandbox belongs to, from its root: a dict ``{tree,
        tree_json}``; ``tree.text`` is the ASCII art, ``tree.root`` the TreeNode."""
        return self.client._call(B.op_tree(self.id))  # type: ignore[no-any-return]

    def coalesce(self, final: Any) -> "Sandbox":
        """Keep ``final`` (a Sandbox or id descending from this one) and delete every other
        sandbox of this subtree, this one included. Returns the kept sandbox, with
        ``message`` and ``terminated_sandboxes``."""
        data = self.client._call(B.op_coalesce(self.id, B.sid_of(final)))
        if isinstance(final, SandboxBase):
            final._merge(data)
        if self.id in (data.get("terminated_sandboxes") or []):
            self._data["status"] = "terminated"
        return self._child(data)

    def pause(self) -> Dict[str, Any]:
        """Freeze every process (cgroup freezer); execs answer 409 until unpause()."""
        return self._status(self.client._call(B.op_pause(self.id, True)))

    def unpause(self) -> Dict[str, Any]:
        return self._status(self.client._call(B.op_pause(self.id, False)))

    def hibernate(self) -> Dict[str, Any]:
        """Checkpoint the processes to disk and free their memory. The next exec (or
        wake()) restores them where they were."""
        return self._status(self.client._call(B.op_hibernate(self.id, False)))

    def wake(self, *, cold: bool = False) -> Dict[str, Any]:
        """Restore a hibernated sandbox: ``{id, status, memory_preserved}``. When its memory
        cannot be restored it starts again from its files (``memory_preserved`` False, the
        sandbox's ``last_error`` says why); ``cold=True`` asks for that directly."""
        return self._status(self.client._call(B.op_hibernate(self.id, True, cold)))

    def snapshot(self, name: str) -> Snapshot:
        """Keep a named snapshot of this sandbox (files, and memory where CRIU works);
        start sandboxes from it with ``client.create(snapshot=name)``."""
        return self.client._call(B.op_snapshot(self.id, name))  # type: ignore

    # ---- files ----

    def read_file(self, path: str, *, user: Optional[str] = None, offset: Optional[int] = None,
                  length: Optional[int] = None) -> bytes:
        """A file's bytes. ``offset``/``length`` read a range (a negative offset: the last
        bytes). NotFound (``file_not_found``) if it does not exist."""
        return self.client._call(  # type: ignore[no-any-return]
            B.op_read_file(self.id, path, user, offset, length))

    def read_text(self, path: str, encoding: str = "utf-8", *,
                  user: Optional[str] = None) -> str:
        return self.read_file(path, user=user).decode(encoding)

    def iter_file(self, path: str, chunk_size: Optional[int] = None, *,
                  user: Optional[str] = None) -> ByteStream:
        """A file streamed in chunks (``for chunk in sb.iter_file(path)``); ``.size``."""
        return ByteStream(self.client, B.op_read_file(self.id, path, user, None, None), path,
                          chunk_size)

    def write_file(self, path: str, data: B.FileContent, *, mode: Union[int, str, None] = None,
                   mkdir: bool = False, user: Optional[str] = None) -> Dict[str, Any]:
        """Write one file atomically. ``data``: bytes, str (UTF-8), a binary file object
        (streamed) or an iterable of byte chunks. ``mode``: 0o755 or "755"; ``mkdir``:
        create missing parent directories. Returns ``{path, size}``."""
        return self.client._call(  # type: ignore[no-any-return]
            B.op_write_file(self.id, path, B.sync_body(data), mode, mkdir, user))

    def upload(self, directory: str, files: B.UploadFiles, *,
               user: Optional[str] = None) -> List[str]:
        """Upload several files into ``directory`` in one multipart request. ``files``:
        local paths (each keeps its base name), ``(name, content)`` pairs, or a dict
        ``{name: content}``. Returns the paths written."""
        parts, opened = B.upload_parts(files)
        try:
            return self.client._call(  # type: ignore[no-any-return]
                B.op_upload(self.id, directory, parts, user))
        finally:
            for f in opened:
                f.close()

    def download(self, path: str, local_path: Union[str, "os.PathLike[str]"], *,
                 user: Optional[str] = None) -> int:
        """Stream a file of the sandbox to a local path (written under a temporary name,
        then renamed). Returns the number of bytes."""
        tmp = _tmp_name(local_path)
        n = 0
        stream = self.iter_file(path, user=user)
        try:
            with open(tmp, "wb") as f:
                for chunk in stream:
                    f.write(chunk)
                    n += len(chunk)
            os.replace(tmp, os.fspath(local_path))
        finally:
            stream.close()
            if os.path.exists(tmp):
                os.unlink(tmp)
        return n

    def list_files(self, path: str = "/", *, user: Optional[str] = None) -> List[FileInfo]:
        """A directory's entries: FileInfo ``{name, path, type, is_dir, size, mode, mtime}``."""
        return self.client._call(B.op_list_files(self.id, path, user))  # type: ignore

    def stat(self, path: str, *, user: Optional[str] = None) -> FileInfo:
        """One file's FileInfo (without reading it)."""
        return self.client._call(B.op_stat(self.id, path, user))  # type: ignore

    def exists(self, path: str, *, user: Optional[str] = None) -> bool:
        try:
            self.client._call(B.op_stat(self.id, path, user))
            return True
        except NotFound as e:
            if e.code == "sandbox_not_found":
                raise
            return False

    def delete_file(self, path: str, *, recursive: bool = False,
                    user: Optional[str] = None) -> Dict[str, Any]:
        """Remove a file or an empty directory (``recursive=True``: a whole tree)."""
        return self.client._call(  # type: ignore[no-any-return]
            B.op_delete_file(self.id, path, recursive, user))

    # ---- the proxy ----

    def proxy(self, method: str = "GET", path: str = "/", port: Optional[int] = None,
              **kwargs: Any) -> httpx.Response:
        """An HTTP request to the sandbox's own server through the daemon's proxy (the
        create-time ``ports``, the image's ExposedPorts, or ``port``). Returns the raw
        ``httpx.Response``, whatever its status. ``kwargs`` go to httpx."""
        kw = self._proxy_kwargs(path, port, kwargs)
        try:
            return self.client._sync.request(method, B.proxy_path(self.id, path), **kw)
        except httpx.TransportError as e:
            raise B.transport_error(e) from e

    def wait_for_http(self, path: str = "/", port: Optional[int] = None, timeout: float = 30.0,
                      interval: float = 0.2) -> httpx.Response:
        """Poll the proxy until the sandbox's server answers with a status below 500;
        returns that response. Raises :class:`~sandboxer.Timeout`."""
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            try:
                r = self.proxy("GET", path, port, timeout=B.make_timeout(min(10.0, timeout)))
                if r.status_code < 500:
                    return r
                last = f"{r.status_code} {r.text[:200]}"
            except SandboxerError as e:
                last = str(e)
            if time.monotonic() >= deadline:
                raise Timeout(f"{path} did not answer within {timeout} s: {last}")
            time.sleep(interval)

    def wait_for_status(self, status: Union[str, Iterable[str]] = DONE, timeout: float = 60.0,
                        interval: float = 0.1) -> "Sandbox":
        """Poll until the sandbox's status is ``status`` (default: exited or terminated);
        returns self. Raises :class:`~sandboxer.Timeout`."""
        want = _statuses(status)
        deadline = time.monotonic() + timeout
        while True:
            self.refresh()
            if self.status in want:
                return self
            if time.monotonic() >= deadline:
                raise Timeout(f"sandbox {self.id[:12]} is {self.status}, not {'/'.join(want)}, "
                              f"after {timeout} s")
            time.sleep(interval)

    wait = wait_for_status

    # ---- events and terminals ----

    def events(self, last_event_id: Optional[Union[int, str]] = None,
               types: Optional[Sequence[str]] = None, timeout: Optional[float] = None,
               reconnect: bool = True, max_events: Optional[int] = None,
               since: Optional[float] = None) -> EventStream:
        """This sandbox's events — :meth:`Sandboxer.events` filtered to it."""
        return EventStream(self.client, last_event_id, self.id, types, timeout, reconnect,
                           max_events, since)

    def pty(self, cmd: Optional[str] = None, *, cols: int = 80, rows: int = 24,
            term: Optional[str] = None, cwd: Optional[str] = None, user: Optional[str] = None,
            timeout: float = 30.0) -> Terminal:
        """A shell (bash if the sandbox has it, else sh), or ``cmd`` run with ``sh -c``, on a
        PTY over WebSocket. Returns a :class:`~sandboxer.Terminal`; its ``wait()`` gives
        the exit code. Needs websocket-client."""
        return self._terminal("exec/pty", self._pty_query(cmd, cols, rows, term, cwd, user),
                              timeout)

    def attach(self, *, timeout: float = 30.0) -> Terminal:
        """The console of an interactive sandbox's main process (``interactive=True``). The
        last 16 KiB of output come first; close() detaches and leaves the process running."""
        return self._terminal("attach", {}, timeout)

    # ---- the coroutine variants ----

    arefresh = _AsyncOps.refresh
    aupdate = _AsyncOps.update
    aset_label = _AsyncOps.set_label
    aset_public = _AsyncOps.set_public
    aterminate = _AsyncOps.terminate
    adelete = _AsyncOps.terminate
    aexec = _AsyncOps.exec
    aexecute = _AsyncOps.execute
    aexec_stream = _AsyncOps.exec_stream
    astart_process = _AsyncOps.start_process
    aprocesses = _AsyncOps.processes
    aprocess = _AsyncOps.process
    aoutput = _AsyncOps.output
    afollow_output = _AsyncOps.follow_output
    alogs = _AsyncOps.logs
    aexecutions = _AsyncOps.executions
    aexecution_logs = _AsyncOps.execution_logs
    afork = _AsyncOps.fork
    atree = _AsyncOps.tree
    astats = _AsyncOps.stats
    acoalesce = _AsyncOps.coalesce
    apause = _AsyncOps.pause
    aunpause = _AsyncOps.unpause
    ahibernate = _AsyncOps.hibernate
    awake = _AsyncOps.wake
    asnapshot = _AsyncOps.snapshot
    aread_file = _AsyncOps.read_file
    aread_text = _AsyncOps.read_text
    aiter_file = _AsyncOps.iter_file
    awrite_file = _AsyncOps.write_file
    aupload = _AsyncOps.upload
    adownload = _AsyncOps.download
    alist_files = _AsyncOps.list_files
    astat = _AsyncOps.stat
    aexists = _AsyncOps.exists
    adelete_file = _AsyncOps.delete_file
    aproxy = _AsyncOps.proxy
    await_for_http = _AsyncOps.wait_for_http
    await_for_status = _AsyncOps.wait_for_status
    aevents = _AsyncOps.events
    apty = _AsyncOps.pty
    aattach = _AsyncOps.attach

    # ---- context managers: delete at the end of the block ----

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.terminate()
        except NotFound:
            pass

    async def __aenter__(self) -> "Sandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await _terminate_quietly(self)
