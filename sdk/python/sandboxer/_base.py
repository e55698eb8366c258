"""What the sync and async clients share: configuration, request specs, parsing."""
from __future__ import annotations

import json
import os
import urllib.parse
from dataclasses import dataclass, field
from typing import (Any, AsyncIterator, Callable, Dict, Iterable, Iterator, List, Mapping,
                    Optional, Sequence, Tuple, Union)

import httpx

from .errors import ConnectionFailed, StreamError, Timeout
from .models import (Event, ExecChunk, ExecResult, Execution, ExecutionLogPage, FileInfo,
                     Image, NewToken, Snapshot, Token, Tree, User)

DEFAULT_SOCKET = "/run/sandboxer/api.sock"
DEFAULT_TIMEOUT = 60.0
CREATE_TIMEOUT = 600.0  # a create may pull an image first
LONG_TIMEOUT = 300.0  # fork, hibernate, wake, snapshots, coalesce: CRIU dumps and restores
CHUNK = 1 << 16

#: What ``write_file`` accepts: bytes, text (UTF-8), a binary file object, or chunks.
FileContent = Union[bytes, bytearray, memoryview, str, Any, Iterable[bytes]]
#: What ``upload`` accepts: local paths, ``(name, content)`` pairs, or ``{name: content}``.
UploadFiles = Union[Mapping[str, FileContent], Sequence[Union[str, "os.PathLike[str]",
                                                               Tuple[str, FileContent]]]]
Command = Union[str, Sequence[str]]


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


# ---- configuration ----

def token_file() -> str:
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = xdg if xdg else os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "sandboxer", "token")


def resolve_token(token: Optional[str]) -> Optional[str]:
    """The token argument, else $SANDBOXER_TOKEN, else the CLI's saved token file."""
    if token:
        return token
    env = os.environ.get("SANDBOXER_TOKEN")
    if env:
        return env.strip()
    try:
        with open(token_file(), encoding="utf-8") as f:
            saved = f.read().strip()
            return saved or None
    except OSError:
        return None


def resolve_target(base_url: Optional[str], socket: Optional[str]) -> Tuple[str, Optional[str]]:
    """(base URL, unix socket path or None). Order: base_url, socket, $SANDBOXER_URL,
    $SANDBOXER_SOCKET, /run/sandboxer/api.sock. ``unix:/path`` as base_url means a socket."""
    if base_url:
        if base_url.startswith("unix:"):  # unix:/run/x.sock or unix:///run/x.sock
            path = base_url[len("unix:"):]
            return "http://sandboxer", path[2:] if path.startswith("//") else path
        if base_url.startswith("http+unix://"):  # http+unix://%2Frun%2Fx.sock
            return "http://sandboxer", urllib.parse.unquote(base_url[len("http+unix://"):]
                                                            .split("/")[0])
        if "://" not in base_url:
            base_url = "http://" + base_url
        return base_url.rstrip("/"), None
    if socket:
        return "http://sandboxer", socket
    env = os.environ.get("SANDBOXER_URL")
    if env:
        return resolve_target(env, None)
    return "http://sandboxer", os.environ.get("SANDBOXER_SOCKET") or DEFAULT_SOCKET


def make_timeout(timeout: Any) -> httpx.Timeout:
    if isinstance(timeout, httpx.Timeout):
        return timeout
    return httpx.Timeout(timeout, connect=10.0 if timeout is None else min(timeout, 10.0))


def headers_for(token: Optional[str]) -> Dict[str, str]:
    h = {"User-Agent": "sandboxer-python"}
    if token:
        h["Authorization"] = f"Bearer {token}"
    return h


# ---- request specs ----

def _json_body(r: httpx.Response) -> Any:
    return r.json()


@dataclass
class Req:
    """One API call, independent of sync/async: what to send and how to read the answer."""

    method: str
    path: str
    params: Optional[Dict[str, Any]] = None
    json: Any = UNSET
    content: Any = None
    files: Any = None
    headers: Optional[Dict[str, str]] = None
    timeout: Any = UNSET
    parse: Callable[[httpx.Response], Any] = _json_body
    extra: Dict[str, Any] = field(default_factory=dict)

    def kwargs(self) -> Dict[str, Any]:
        kw: Dict[str, Any] = {}
        if self.params:
            kw["params"] = {k: _qv(v) for k, v in self.params.items() if v is not None}
        if self.json is not UNSET:
            kw["json"] = self.json
        if self.content is not None:
            kw["content"] = self.content
        if self.files is not None:
            kw["files"] = self.files
        if self.headers:
            kw["headers"] = self.headers
        if self.timeout is not UNSET:
            kw["timeout"] = make_timeout(self.timeout)
        return kw


def _qv(v: Any) -> Any:
    if isinstance(v, bool):
        return "true" if v else "false"
    return v


def q(segment: Any) -> str:
    """One path segment, percent-encoded."""
    return urllib.parse.quote(str(segment), safe="")


def qpath(path: str) -> str:
    """A path inside a sandbox as it goes after /files/ (slashes kept, the rest encoded)."""
    p = str(path)
    if not p.startswith("/"):
        p = "/" + p
    return urllib.parse.quote(p.lstrip("/"), safe="/")


def sid_of(x: Any) -> str:
    """A sandbox id from a Sandbox object, a dict with 'id', or a string."""
    if isinstance(x, str):
        return x
    if isinstance(x, Mapping):
        return str(x["id"])
    sid = getattr(x, "id", None)
    if isinstance(sid, str):
        return sid
    raise TypeError(f"expected a sandbox or its id, got {type(x).__name__}")


def transport_error(e: Exception) -> ConnectionFailed:
    if isinstance(e, httpx.TimeoutException):
        return Timeout(f"{type(e).__name__}: {e}")
    return ConnectionFailed(f"{type(e).__name__}: {e}")


def drop_none(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _list_of(key: str, cls: Callable[[Any], Any]) -> Callable[[httpx.Response], Any]:
    return lambda r: [cls(x) for x in r.json().get(key, [])]


def _model(cls: Callable[[Any], Any]) -> Callable[[httpx.Response], Any]:
    return lambda r: cls(r.json())


def _text(r: httpx.Response) -> str:
    return r.text


# ---- the operations ----

def op_health() -> Req:
    return Req("GET", "/healthz")


def op_ready() -> Req:
    return Req("GET", "/readyz")


def op_openapi() -> Req:
    return Req("GET", "/openapi.json")


def op_metrics() -> Req:
    return Req("GET", "/metrics", parse=_text)


def op_stats(sid: str) -> Req:
    return Req("GET", f"/sandboxes/{q(sid)}/stats")


def op_me() -> Req:
    return Req("GET", "/auth/me", parse=_model(User))


def op_create_token(name: Optional[str], user: Optional[str], admin: Optional[bool]) -> Req:
    return Req("POST", "/auth/tokens", json=drop_none({"name": name, "user": user,
                                                       "admin": admin}),
               parse=_model(NewToken))


def op_tokens(user: Optional[str], all: bool) -> Req:
    return Req("GET", "/auth/tokens", params={"user": user, "all": True if all else None},
               parse=_list_of("tokens", Token))


def op_delete_token(token_id: str) -> Req:
    return Req("DELETE", f"/auth/tokens/{q(token_id)}")


def create_body(image: Optional[str], label: Optional[str], interactive: Optional[bool],
                **opts: Any) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    if image is not None:
        body["image"] = image
    if label is not None:
        body["label"] = label
    if interactive is not None:
        body["interactive"] = interactive
    for k, v in opts.items():
        if v is None:
            continue
        if k == "args" and isinstance(v, str):
            raise TypeError("args is a list of strings (the main process's argv)")
        if k in ("args", "ports", "egress_allow"):
            v = list(v)
        if k == "env":
            v = {str(a): str(b) for a, b in dict(v).items()}
        body[k] = v
    # With none of image, template and snapshot the daemon starts the template "base".
    return body


def op_create(body: Dict[str, Any], timeout: Any) -> Req:
    return Req("POST", "/sandboxes", json=body,
               timeout=CREATE_TIMEOUT if timeout is UNSET else timeout)


def op_list() -> Req:
    return Req("GET", "/sandboxes", parse=lambda r: r.json().get("sandboxes", []))


def op_get(sid: str) -> Req:
    return Req("GET", f"/sandboxes/{q(sid)}")


def op_update(sid: str, label: Optional[str], public: Optional[bool]) -> Req:
    return Req("PATCH", f"/sandboxes/{q(sid)}", json=drop_none({"label": label,
                                                               "public": public}))


def op_delete(sid: str) -> Req:
    return Req("DELETE", f"/sandboxes/{q(sid)}", timeout=LONG_TIMEOUT)


def _exec_timeout(timeout: Optional[float], client_timeout: Any) -> Any:
    if client_timeout is not UNSET:
        return client_timeout
    # the daemon kills the command at `timeout`; wait a little longer for its answer
    return None if timeout is None else float(timeout) + 30.0


def exec_req(command: Command, *, env: Optional[Mapping[str, str]] = None,
             cwd: Optional[str] = None, user: Optional[str] = None,
             stdin: Union[str, bytes, None] = None, timeout: Optional[float] = None,
             stream: bool = False, client_timeout: Any = UNSET, sid: str) -> Req:
    """A string is shell code (sh -c, POST /execute); a list is an argv (POST /exec).
    A string with env/cwd/user/stdin goes to /exec as ["/bin/sh", "-c", code]."""
    if isinstance(stdin, (bytes, bytearray)):
        stdin = bytes(stdin).decode("utf-8")
    params = {"stream": True} if stream else None
    t = _exec_timeout(timeout, client_timeout)
    if isinstance(command, str):
        if env is None and cwd is None and user is None and stdin is None:
            return Req("POST", f"/sandboxes/{q(sid)}/execute",
                       json=drop_none({"code": command, "timeout": timeout}),
                       params=params, timeout=t, parse=_model(ExecResult))
        argv: List[str] = ["/bin/sh", "-c", command]
    else:
        if isinstance(command, (bytes, bytearray)):
            raise TypeError("command must be str (shell code) or a list of str (argv)")
        argv = [str(a) for a in command]
        if not argv:
            raise ValueError("argv must not be empty")
    body = drop_none({"argv": argv, "cwd": cwd, "user": user, "stdin": stdin,
                      "timeout": timeout})
    if env is not None:
        body["env"] = {str(k): str(v) for k, v in dict(env).items()}
    return Req("POST", f"/sandboxes/{q(sid)}/exec", json=body, params=params, timeout=t,
               parse=_model(ExecResult))


def op_output(sid: str, follow: bool) -> Req:
    return Req("GET", f"/sandboxes/{q(sid)}/logs", params={"stream": True} if follow else None,
               timeout=None if follow else UNSET, parse=_text)


def op_execution_logs(sid: str, limit: int) -> Req:
    return Req("GET", f"/sandboxes/{q(sid)}/execution-logs", params={"limit": limit})


def op_executions(sid: str, limit: Optional[int], newest_first: bool) -> Req:
    path = "command-executions" if newest_first else "execution-logs"
    return Req("GET", f"/sandboxes/{q(sid)}/{path}", params={"limit": limit},
               parse=_list_of("executions", Execution))


def op_execution_page(sid: str, eid: int, start_id: Optional[int],
                      limit: Optional[int]) -> Req:
    return Req("GET", f"/sandboxes/{q(sid)}/command-executions/{int(eid)}/logs",
               params={"start_id": start_id, "limit": limit}, parse=_model(ExecutionLogPage))


def op_fork(sid: str, label: Optional[str], hostname: Optional[str]) -> Req:
    return Req("POST", f"/sandboxes/{q(sid)}/fork",
               json=drop_none({"label": label, "hostname": hostname}), timeout=LONG_TIMEOUT)


def op_tree(sid: str) -> Req:
    return Req("GET", f"/sandboxes/{q(sid)}/tree", parse=_model(Tree))


def op_coalesce(sid: str, final: str) -> Req:
    return Req("POST", f"/sandboxes/{q(sid)}/coalesce/{q(final)}", timeout=LONG_TIMEOUT)


def op_pause(sid: str, pause: bool) -> Req:
    return Req("PUT" if pause else "DELETE", f"/sandboxes/{q(sid)}/pause", timeout=LONG_TIMEOUT)


def op_hibernate(sid: str, wake: bool, cold: bool = False) -> Req:
    return Req("POST", f"/sandboxes/{q(sid)}/{'wake' if wake else 'hibernate'}",
               json={"cold": True} if cold else None, timeout=LONG_TIMEOUT)


def op_snapshot(sid: str, name: str) -> Req:
    return Req("POST", f"/sandboxes/{q(sid)}/snapshots", json={"name": name},
               timeout=LONG_TIMEOUT, parse=_model(Snapshot))


def op_snapshots() -> Req:
    return Req("GET", "/snapshots", parse=_list_of("snapshots", Snapshot))


def op_delete_snapshot(name: str) -> Req:
    return Req("DELETE", f"/snapshots/{q(name)}", timeout=LONG_TIMEOUT)


def op_images() -> Req:
    return Req("GET", "/images", parse=_list_of("images", Image))


def op_pull(image: str) -> Req:
    return Req("POST", "/images/pull", json={"image": image}, timeout=CREATE_TIMEOUT,
               parse=_model(Image))


def op_delete_image(ref: str) -> Req:
    return Req("DELETE", "/images/" + urllib.parse.quote(ref, safe="/:@"))


def op_import_image(path: str, ref: Optional[str]) -> Req:
    return Req("POST", "/images/import", json=drop_none({"path": path, "ref": ref}),
               timeout=CREATE_TIMEOUT, parse=_model(Image))


# ---- files ----

def files_path(sid: str, path: str) -> str:
    return f"/sandboxes/{q(sid)}/files/{qpath(path)}"


def _is_listing(r: httpx.Response) -> bool:
    """A directory answers a JSON listing; a file answers its bytes with Accept-Ranges."""
    return "accept-ranges" not in r.headers and \
        r.headers.get("content-type", "").startswith("application/json")


def op_stat(sid: str, path: str, user: Optional[str]) -> Req:
    return Req("GET", files_path(sid, path), params={"stat": True, "user": user},
               parse=_model(FileInfo))


def op_list_files(sid: str, path: str, user: Optional[str]) -> Req:
    def parse(r: httpx.Response) -> List[FileInfo]:
        if not _is_listing(r):
            from .errors import InvalidRequest
            raise InvalidRequest(400, "not_directory", f"{path} is not a directory")
        return [FileInfo(e) for e in r.json().get("entries", [])]
    return Req("GET", files_path(sid, path), params={"user": user}, parse=parse)


def range_header(offset: Optional[int], length: Optional[int]) -> Optional[Dict[str, str]]:
    if offset is None and length is None:
        return None
    start = offset or 0
    if start < 0:  # the last -offset bytes
        return {"Range": f"bytes={start}"}
    end = "" if length is None else str(start + length - 1)
    return {"Range": f"bytes={start}-{end}"}


def file_response_check(r: httpx.Response, path: str) -> None:
    if _is_listing(r):
        from .errors import InvalidRequest
        raise InvalidRequest(400, "is_directory", f"{path} is a directory")


def op_read_file(sid: str, path: str, user: Optional[str], offset: Optional[int],
                 length: Optional[int]) -> Req:
    def parse(r: httpx.Response) -> bytes:
        file_response_check(r, path)
        return r.content
    return Req("GET", files_path(sid, path), params={"user": user},
               headers=range_header(offset, length), timeout=None, parse=parse)


def write_params(mode: Union[int, str, None], mkdir: bool, user: Optional[str]) -> Dict[str, Any]:
    if isinstance(mode, int):
        mode = format(mode, "o")
    return {"mode": mode, "mkdir": True if mkdir else None, "user": user}


def sync_body(data: FileContent) -> Any:
    """Request content for httpx's sync client: bytes, or chunks streamed from a file."""
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if hasattr(data, "read"):
        reader: Any = data

        def chunks() -> Iterator[bytes]:
            while True:
                b = reader.read(CHUNK)
                if not b:
                    return
                yield b.encode("utf-8") if isinstance(b, str) else b
        return chunks()
    return iter(data)


def async_body(data: FileContent) -> Any:
    """Request content for httpx's async client (which needs bytes or an async iterator)."""
    if isinstance(data, (str, bytes, bytearray, memoryview)):
        return sync_body(data)
    if hasattr(data, "__aiter__"):
        return data
    it = sync_body(data)

    async def agen() -> AsyncIterator[bytes]:
        for b in it:
            yield b
    return agen()


def op_write_file(sid: str, path: str, content: Any, mode: Union[int, str, None], mkdir: bool,
                  user: Optional[str]) -> Req:
    return Req("PUT", files_path(sid, path), params=write_params(mode, mkdir, user),
               content=content, headers={"Content-Type": "application/octet-stream"},
               timeout=None)


def upload_parts(files: UploadFiles) -> Tuple[List[Tuple[str, Tuple[str, Any]]], List[Any]]:
    """Multipart parts (field "files") and the file objects opened for them."""
    parts: List[Tuple[str, Tuple[str, Any]]] = []
    opened: List[Any] = []
    items: Iterable[Any] = files.items() if isinstance(files, Mapping) else files
    for item in items:
        if isinstance(item, tuple):
            name, content = item
        else:  # a local path
            local = os.fspath(item)
            name = os.path.basename(local.rstrip("/"))
            content = open(local, "rb")
            opened.append(content)
        if isinstance(content, str):
            content = content.encode("utf-8")
        elif isinstance(content, (bytearray, memoryview)):
            content = bytes(content)
        elif not isinstance(content, bytes) and not hasattr(content, "read"):
            content = b"".join(content)
        parts.append(("files", (str(name), content)))
    if not parts:
        raise ValueError("upload() needs at least one file")
    return parts, opened


def op_upload(sid: str, directory: str, parts: Any, user: Optional[str]) -> Req:
    # a path written twice is one path (the daemon can list a part twice on a reused
    # connection)
    return Req("POST", files_path(sid, directory), params={"user": user}, files=parts,
               timeout=None, parse=lambda r: list(dict.fromkeys(r.json().get("uploaded", []))))


def op_delete_file(sid: str, path: str, recursive: bool, user: Optional[str]) -> Req:
    return Req("DELETE", files_path(sid, path),
               params={"recursive": True if recursive else None, "user": user})


def proxy_path(sid: str, path: str) -> str:
    p = str(path)
    return f"/sandboxes/{q(sid)}/proxy/{p.lstrip('/')}"


# ---- streams: exec ndjson and events SSE ----

def exec_chunk(line: str) -> Optional[ExecChunk]:
    """One ndjson line of an exec stream; raises StreamError for an "error" line."""
    line = line.strip()
    if not line:
        return None
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise StreamError(0, "bad_stream", f"not JSON in the exec stream: {line[:200]!r}") from e
    chunk = ExecChunk(obj)
    if chunk.get("type") == "error":
        raise StreamError(0, str(obj.get("code") or "exec_error"), str(obj.get("output") or ""))
    return chunk


class ExecCollector:
    """Gathers the chunks of an exec stream into an ExecResult."""

    def __init__(self) -> None:
        self.out: List[str] = []
        self.err: List[str] = []
        self.exit: Optional[ExecChunk] = None

    def add(self, c: ExecChunk) -> None:
        if c["type"] == "stdout":
            self.out.append(c.get("output", ""))
        elif c["type"] == "stderr":
            self.err.append(c.get("output", ""))
        elif c["type"] == "exit":
            self.exit = c

    def result(self) -> ExecResult:
        if self.exit is None:
            raise StreamError(0, "stream_broken", "the exec stream ended without an exit line")
        return ExecResult(stdout="".join(self.out), stderr="".join(self.err),
                          exit_code=self.exit.get("exit_code"),
                          timed_out=bool(self.exit.get("timed_out", False)))


class SSEParser:
    """Server-Sent Events, one line at a time; feed() returns an Event when one completes."""

    def __init__(self) -> None:
        self.id: Optional[str] = None
        self.event: Optional[str] = None
        self.data: List[str] = []
        self.last_id: Optional[str] = None

    def feed(self, line: str) -> Optional[Event]:
        line = line.rstrip("\r\n")
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "id":
            self.id = value
        elif name == "event":
            self.event = value
        elif name == "data":
            self.data.append(value)
        return None

    def _dispatch(self) -> Optional[Event]:
        if self.id is not None:
            self.last_id = self.id
        if not self.data:
            self.id = self.event = None
            return None
        text = "\n".join(self.data)
        ev_id, ev_type = self.id, self.event
        self.id, self.event, self.data = None, None, []
        try:
            obj = json.loads(text)
        except ValueError:
            obj = {"data": text}
        if not isinstance(obj, dict):
            obj = {"data": obj}
        e = Event(obj)
        if ev_id is not None:
            try:
                e["id"] = int(ev_id)
            except ValueError:
                e["id"] = ev_id
        if ev_type and "type" not in e:
            e["type"] = ev_type
        return e


def event_matches(e: Event, sandbox: Optional[str], types: Optional[Sequence[str]]) -> bool:
    if sandbox is not None and e.get("container_id") != sandbox:
        return False
    if types is not None and e.get("type") not in types:
        return False
    return True


def events_headers(last_event_id: Optional[Union[int, str]]) -> Dict[str, str]:
    h = {"Accept": "text/event-stream"}
    if last_event_id is not None:
        h["Last-Event-ID"] = str(last_event_id)
    return h


def ws_url(base_url: str, path: str, query: Mapping[str, Any]) -> str:
    u = httpx.URL(base_url)
    scheme = "wss" if u.scheme == "https" else "ws"
    prefix = u.raw_path.decode("ascii").split("?")[0].rstrip("/")
    qs = urllib.parse.urlencode({k: _qv(v) for k, v in query.items() if v is not None},
                                quote_via=urllib.parse.quote)
    host = u.host if u.port is None else f"{u.host}:{u.port}"
    if ":" in (u.host or "") and not host.startswith("["):  # IPv6 literal
        host = f"[{u.host}]" + ("" if u.port is None else f":{u.port}")
    return f"{scheme}://{host}{prefix}{path}" + (f"?{qs}" if qs else "")
