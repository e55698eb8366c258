"""The clients: :class:`Sandboxer` (blocking, with ``a``-prefixed coroutines too) and
:class:`AsyncSandboxer` (every method a coroutine)."""
from __future__ import annotations

import asyncio
from typing import (Any, Awaitable, Callable, Dict, Generator, Generic, Iterable, List, Mapping,
                    Optional, Sequence, TypeVar, Union)

import httpx

from . import _base as B
from .errors import error_from_response
from .models import Image, NewToken, Snapshot, Token, User
from .sandbox import AsyncSandbox, Sandbox, SandboxBase, _terminate_quietly
from .streams import AsyncEventStream, EventStream

__all__ = ["Sandboxer", "AsyncSandboxer", "CreateCall"]

SB = TypeVar("SB", bound=SandboxBase)


class CreateCall(Generic[SB]):
    """What ``acreate()`` / ``AsyncSandboxer.create()`` return: await it for the sandbox,
    or use it with ``async with`` to have the sandbox deleted at the end of the block::

        sb = await client.acreate("busybox")
        async with client.acreate("busybox") as sb:
            ...
    """

    def __init__(self, factory: Callable[[], Awaitable[SB]]) -> None:
        self._factory = factory
        self._sandbox: Optional[SB] = None

    async def _get(self) -> SB:
        if self._sandbox is None:  # awaiting twice gives the same sandbox, not a second one
            self._sandbox = await self._factory()
        return self._sandbox

    def __await__(self) -> Generator[Any, None, SB]:
        return self._get().__await__()

    async def __aenter__(self) -> SB:
        return await self._get()

    async def __aexit__(self, *exc: Any) -> None:
        if self._sandbox is not None:
            await _terminate_quietly(self._sandbox)


def _create_body(image: Optional[str], label: Optional[str], interactive: Optional[bool],
                 env: Optional[Mapping[str, str]], args: Optional[Sequence[str]],
                 hostname: Optional[str], cpus: Optional[float], memory: Union[int, str, None],
                 pids: Optional[int], disk: Union[int, str, None], network: Optional[str],
                 ports: Optional[Sequence[int]], public: Optional[bool],
                 runtime: Optional[str], idle_timeout: Optional[int],
                 snapshot: Optional[str], extra: Optional[Mapping[str, Any]],
                 egress_allow: Optional[Sequence[str]] = None,
                 net_raw: Optional[bool] = None, template: Optional[str] = None,
                 setuid: Optional[bool] = None) -> Dict[str, Any]:
    body = B.create_body(image, label, interactive, env=env, args=args, hostname=hostname,
                         cpus=cpus, memory=memory, pids=pids, disk=disk, network=network,
                         egress_allow=egress_allow, ports=ports, public=public,
                         runtime=runtime, idle_timeout=idle_timeout, snapshot=snapshot,
                         net_raw=net_raw, template=template, setuid=setuid)
    if extra:
        body.update(extra)
    return body


def _filter(items: List[Dict[str, Any]], status: Union[str, Iterable[str], None],
            label: Optional[str]) -> List[Dict[str, Any]]:
    if status is not None:
        want = {status} if isinstance(status, str) else set(status)
        items = [s for s in items if s.get("status") in want]
    if label is not None:
        items = [s for s in items if s.get("label") == label]
    return items


class _ClientBase(Generic[SB]):
    base_url: str
    socket: Optional[str]
    token: Optional[str]
    headers: Dict[str, str]

    def _setup(self, base_url: Optional[str], token: Optional[str], socket: Optional[str],
               timeout: Any, headers: Optional[Mapping[str, str]]) -> None:
        self.base_url, self.socket = B.resolve_target(base_url, socket)
        self.token = B.resolve_token(token)
        self.timeout = B.make_timeout(timeout)
        self.headers = B.headers_for(self.token)
        if headers:
            self.headers.update(headers)

    def _client_kwargs(self) -> Dict[str, Any]:
        kw: Dict[str, Any] = {"base_url": self.base_url, "headers": self.headers,
                              "timeout": self.timeout}
        if self.socket:
            kw["trust_env"] = False  # an HTTP(S)_PROXY must not capture the unix socket
        return kw

    def _new_async(self, keepalive: bool = True) -> httpx.AsyncClient:
        kw = self._client_kwargs()
        if not keepalive:
            kw["limits"] = httpx.Limits(max_keepalive_connections=0)
        if self.socket:
            kw["transport"] = httpx.AsyncHTTPTransport(uds=self.socket)
        return httpx.AsyncClient(**kw)

    async def _acall(self, req: B.Req) -> Any:
        try:
            r = await self._async.request(req.method, req.path, **req.kwargs())
        except httpx.TransportError as e:
            raise B.transport_error(e) from e
        if r.status_code >= 400:
            raise error_from_response(r)
        return req.parse(r)

    async def _aopen(self, req: B.Req) -> httpx.Response:
        kw = req.kwargs()
        try:
            request = self._async.build_request(req.method, req.path, **kw)
            r = await self._async.send(request, stream=True)
        except httpx.TransportError as e:
            raise B.transport_error(e) from e
        if r.status_code >= 400:
            try:
                await r.aread()
            finally:
                await r.aclose()
            raise error_from_response(r)
        return r

    @property
    def _async(self) -> httpx.AsyncClient:  # pragma: no cover - overridden
        raise NotImplementedError

    def _wrap(self, data: Mapping[str, Any]) -> SB:  # pragma: no cover - overridden
        raise NotImplementedError

    def __repr__(self) -> str:
        where = f"unix:{self.socket}" if self.socket else self.base_url
        return f"<{type(self).__name__} {where}>"


class _AsyncClientOps(_ClientBase[SB]):
    """The coroutine implementations. AsyncSandboxer has them under these names; Sandboxer
    has them with an ``a`` prefix. They reach the daemon through ``self._acall`` and make
    sandbox handles with ``self._wrap`` (Sandbox or AsyncSandbox, depending on the client),
    and call no other method through ``self`` by name."""

    async def health(self: _ClientBase[SB]) -> Dict[str, Any]:
        """``GET /healthz``: ``{status, version}`` (no token needed)."""
        return await self._acall(B.op_health())  # type: ignore[no-any-return]

    async def ready(self: _ClientBase[SB]) -> Dict[str, Any]:
        """``GET /readyz``: ``{status, schema_version}``; ServiceUnavailable if not ready."""
        return await self._acall(B.op_ready())  # type: ignore[no-any-return]

    async def openapi(self: _ClientBase[SB]) -> Dict[str, Any]:
        """The daemon's OpenAPI 3.1 document."""
        return await self._acall(B.op_openapi())  # type: ignore[no-any-return]

    async def me(self: _ClientBase[SB]) -> User:
        """The caller: ``{id, name, admin, created_at, token: {id, name}}``."""
        return await self._acall(B.op_me())  # type: ignore[no-any-return]

    async def metrics(self: _ClientBase[SB]) -> str:
        """``GET /metrics`` (admins): the Prometheus text exposition."""
        return await self._acall(B.op_metrics())  # type: ignore[no-any-return]

    def create(self: _ClientBase[SB], image: Optional[str] = None, label: Optional[str] = None,
               interactive: bool = False, *, env: Optional[Mapping[str, str]] = None,
               args: Optional[Sequence[str]] = None, hostname: Optional[str] = None,
               cpus: Optional[float] = None, memory: Union[int, str, None] = None,
               pids: Optional[int] = None, disk: Union[int, str, None] = None,
               network: Optional[str] = None, ports: Optional[Sequence[int]] = None,
               public: Optional[bool] = None, runtime: Optional[str] = None,
               idle_timeout: Optional[int] = None, snapshot: Optional[str] = None,
               egress_allow: Optional[Sequence[str]] = None,
               net_raw: Optional[bool] = None, template: Optional[str] = None,
               setuid: Optional[bool] = None,
               extra: Optional[Mapping[str, Any]] = None,
               timeout: Optional[float] = B.CREATE_TIMEOUT) -> CreateCall[SB]:
        """Create a sandbox; options as for :meth:`Sandboxer.create`. Await the result
        (``sb = await client.acreate(...)``, ``sb = await aclient.create(...)``) or use it
        with ``async with`` to have the sandbox deleted at the end of the block."""
        body = _create_body(image, label, interactive, env, args, hostname, cpus, memory, pids,
                            disk, network, ports, public, runtime, idle_timeout, snapshot, extra,
                            egress_allow, net_raw, template, setuid)

        async def make() -> SB:
            return self._wrap(await self._acall(B.op_create(body, timeout)))
        return CreateCall(make)

    async def get(self: _ClientBase[SB], sandbox_id: str) -> SB:
        """One sandbox, by id (64 hex) or name (ULID). NotFound for another owner's."""
        return self._wrap(await self._acall(B.op_get(B.sid_of(sandbox_id))))

    async def list(self: _ClientBase[SB], status: Union[str, Iterable[str], None] = None,
                   label: Optional[str] = None) -> List[SB]:
        """The caller's sandboxes (terminated ones included), optionally only those with
        ``status`` (a status or several) and/or ``label``."""
        return [self._wrap(s) for s in _filter(await self._acall(B.op_list()), status, label)]

    async def update(self: _ClientBase[SB], sandbox_id: str, label: Optional[str] = None,
                     public: Optional[bool] = None) -> Dict[str, Any]:
        """Change a sandbox's label and/or public flag."""
        return await self._acall(  # type: ignore[no-any-return]
            B.op_update(B.sid_of(sandbox_id), label, public))

    async def delete(self: _ClientBase[SB], sandbox_id: str) -> Dict[str, Any]:
        """Delete (terminate) a sandbox: ``{id, status: "terminated"}``."""
        return await self._acall(  # type: ignore[no-any-return]
            B.op_delete(B.sid_of(sandbox_id)))

    def events(self: _ClientBase[SB], last_event_id: Optional[Union[int, str]] = None, *,
               sandbox: Optional[Any] = None, types: Optional[Sequence[str]] = None,
               timeout: Optional[float] = None, reconnect: bool = True,
               max_events: Optional[int] = None,
               since: Optional[float] = None) -> AsyncEventStream:
        """``async for ev in ...`` over the caller's sandboxes' events — see
        :meth:`Sandboxer.events`."""
        sid = None if sandbox is None else B.sid_of(sandbox)
        return AsyncEventStream(self, last_event_id, sid, types, timeout, reconnect, max_events,
                                since)

    async def snapshots(self: _ClientBase[SB]) -> List[Snapshot]:
        """The caller's snapshots."""
        return await self._acall(B.op_snapshots())  # type: ignore[no-any-return]

    async def delete_snapshot(self: _ClientBase[SB], name: str) -> Dict[str, Any]:
        return await self._acall(B.op_delete_snapshot(name))  # type: ignore[no-any-return]

    async def images(self: _ClientBase[SB]) -> List[Image]:
        """The images in the daemon's store."""
        return await self._acall(B.op_images())  # type: ignore[no-any-return]

    async def pull_image(self: _ClientBase[SB], image: str) -> Image:
        """Pull (or refresh) an image into the store."""
        return await self._acall(B.op_pull(image))  # type: ignore[no-any-return]

    async def delete_image(self: _ClientBase[SB], ref: str) -> Dict[str, Any]:
        """Remove an image (admins; Conflict ``image_in_use`` while sandboxes use it)."""
        return await self._acall(B.op_delete_image(ref))  # type: ignore[no-any-return]

    async def import_image(self: _ClientBase[SB], path: str, ref: Optional[str] = None) -> Image:
        """Import an OCI layout or archive from a path on the daemon's host (admins)."""
        return await self._acall(B.op_import_image(path, ref))  # type: ignore[no-any-return]

    async def create_token(self: _ClientBase[SB], name: Optional[str] = None,
                           user: Optional[str] = None,
                           admin: Optional[bool] = None) -> NewToken:
        """A new token for the caller, or (admins) for ``user``, who is created if new
        (``admin`` sets the new user's role). ``.token`` is the secret, shown only now."""
        return await self._acall(B.op_create_token(name, user, admin))  # type: ignore

    async def tokens(self: _ClientBase[SB], user: Optional[str] = None,
                     all: bool = False) -> List[Token]:
        """The caller's tokens (admins: ``user``'s, or everyone's with ``all=True``)."""
        return await self._acall(B.op_tokens(user, all))  # type: ignore[no-any-return]

    async def delete_token(self: _ClientBase[SB], token_id: str) -> Dict[str, Any]:
        """Revoke a token by its id (``tok_...``)."""
        return await self._acall(B.op_delete_token(token_id))  # type: ignore[no-any-return]


class Sandboxer(_ClientBase[Sandbox]):
    """A client of a Sandboxer daemon.

    ``base_url``: ``http://host:8000`` (default ``$SANDBOXER_URL``; ``unix:/path`` for a
    socket); ``socket``: a unix socket path (default ``$SANDBOXER_SOCKET``, else
    ``/run/sandboxer/api.sock`` when no URL is set); ``token``: the bearer token (default
    ``$SANDBOXER_TOKEN``, else the CLI's saved token file). ``timeout``: the default
    per-request timeout in seconds (creates, forks, execs and streams wait longer).

    Every method blocks; each also exists as a coroutine with an ``a`` prefix
    (``acreate``, ``aget``, ...), running on an internal ``httpx.AsyncClient``.
    """

    def __init__(self, base_url: Optional[str] = None, token: Optional[str] = None, *,
                 socket: Optional[str] = None, timeout: Optional[float] = B.DEFAULT_TIMEOUT,
                 headers: Optional[Mapping[str, str]] = None) -> None:
        self._setup(base_url, token, socket, timeout, headers)
        kw = self._client_kwargs()
        if self.socket:
            kw["transport"] = httpx.HTTPTransport(uds=self.socket)
        self._sync = httpx.Client(**kw)
        self._aclient: Optional[httpx.AsyncClient] = None
        self._aloop: Optional[asyncio.AbstractEventLoop] = None

    @property
    def _async(self) -> httpx.AsyncClient:
        """An AsyncClient for the running event loop (a new one if the loop changed). It
        keeps no idle connections: nothing is left open on a loop that ends (asyncio.run
        called several times); AsyncSandboxer pools them."""
        loop = asyncio.get_running_loop()
        if self._aclient is None or self._aloop is not loop:
            self._aclient = self._new_async(keepalive=False)
            self._aloop = loop
        return self._aclient

    def _call(self, req: B.Req) -> Any:
        try:
            r = self._sync.request(req.method, req.path, **req.kwargs())
        except httpx.TransportError as e:
            raise B.transport_error(e) from e
        if r.status_code >= 400:
            raise error_from_response(r)
        return req.parse(r)

    def _open(self, req: B.Req) -> httpx.Response:
        kw = req.kwargs()
        try:
            request = self._sync.build_request(req.method, req.path, **kw)
            r = self._sync.send(request, stream=True)
        except httpx.TransportError as e:
            raise B.transport_error(e) from e
        if r.status_code >= 400:
            try:
                r.read()
            finally:
                r.close()
            raise error_from_response(r)
        return r

    def _wrap(self, data: Mapping[str, Any]) -> Sandbox:
        return Sandbox(self, **dict(data))

    def close(self) -> None:
        """Close the connections (the async client's too, if its loop is gone or idle)."""
        self._sync.close()
        self._aclient = None

    async def aclose(self) -> None:
        self._sync.close()
        if self._aclient is not None and self._aloop is asyncio.get_running_loop():
            await self._aclient.aclose()
        self._aclient = None

    def __enter__(self) -> "Sandboxer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> "Sandboxer":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # ---- the daemon ----

    def health(self) -> Dict[str, Any]:
        """``GET /healthz``: ``{status, version}`` (no token needed)."""
        return self._call(B.op_health())  # type: ignore[no-any-return]

    def ready(self) -> Dict[str, Any]:
        """``GET /readyz``: ``{status, schema_version}``; ServiceUnavailable if not ready."""
        return self._call(B.op_ready())  # type: ignore[no-any-return]

    def openapi(self) -> Dict[str, Any]:
        """The daemon's OpenAPI 3.1 document."""
        return self._call(B.op_openapi())  # type: ignore[no-any-return]

    def me(self) -> User:
        """The caller: ``{id, name, admin, created_at, token: {id, name}}``."""
        return self._call(B.op_me())  # type: ignore[no-any-return]

    def metrics(self) -> str:
        """``GET /metrics`` (admins): the Prometheus text exposition."""
        return self._call(B.op_metrics())  # type: ignore[no-any-return]

    # ---- sandboxes ----

    def create(self, image: Optional[str] = None, label: Optional[str] = None,
               interactive: bool = False, *, env: Optional[Mapping[str, str]] = None,
               args: Optional[Sequence[str]] = None, hostname: Optional[str] = None,
               cpus: Optional[float] = None, memory: Union[int, str, None] = None,
               pids: Optional[int] = None, disk: Union[int, str, None] = None,
               network: Optional[str] = None, ports: Optional[Sequence[int]] = None,
               public: Optional[bool] = None, runtime: Optional[str] = None,
               idle_timeout: Optional[int] = None, snapshot: Optional[str] = None,
               egress_allow: Optional[Sequence[str]] = None,
               net_raw: Optional[bool] = None, template: Optional[str] = None,
               setuid: Optional[bool] = None,
               extra: Optional[Mapping[str, Any]] = None,
               timeout: Optional[float] = B.CREATE_TIMEOUT) -> Sandbox:
        """Create a sandbox from ``image``, ``template`` (a template's name; a bare image
        name that is a template means it too) or ``snapshot`` (a snapshot's name) and return
        it running; with none of them, from the template "base" (Debian with python3, node,
        git, sudo; no registry needed). Use it in a ``with`` block to have it deleted
        afterwards. ``setuid``: let setuid programs (sudo) gain privileges (templates' sandboxes
        have it).

        ``args``: the main process (default: the image's entrypoint+cmd; with neither, the
        sandbox idles, ready for exec). ``interactive``: the main process gets a console
        (see ``attach()``). ``env``, ``hostname``; limits ``cpus`` (e.g. 0.5), ``memory``
        (bytes or "512M"), ``pids``, ``disk``; ``network``: "none" (only your own
        sandboxes), "open" (NAT out) or "proxy" (only the hosts of ``egress_allow``, through
        the daemon's egress proxy); ``ports``: the HTTP ports the proxy reaches;
        ``public``: the proxy serves without a token; ``runtime``: "runc" or "runsc" (gVisor);
        ``idle_timeout``: seconds idle before it hibernates; ``net_raw``: keep CAP_NET_RAW
        (raw sockets; off by default, ping works without it). ``extra``: more JSON fields.
        """
        body = _create_body(image, label, interactive, env, args, hostname, cpus, memory, pids,
                            disk, network, ports, public, runtime, idle_timeout, snapshot, extra,
                            egress_allow, net_raw, template, setuid)
        return self._wrap(self._call(B.op_create(body, timeout)))

    def from_snapshot(self, snapshot: str, label: Optional[str] = None,
                      **kwargs: Any) -> Sandbox:
        """A new sandbox started from a snapshot (its files, and its memory if kept)."""
        return self.create(None, label, None, snapshot=snapshot, **kwargs)  # type: ignore

    def get(self, sandbox_id: str) -> Sandbox:
        """One sandbox, by id (64 hex) or name (ULID). NotFound for another owner's."""
        return self._wrap(self._call(B.op_get(B.sid_of(sandbox_id))))

    def sandbox(self, sandbox_id: str) -> Sandbox:
        """A handle on a sandbox by id without fetching it (call ``refresh()`` to)."""
        return Sandbox(self, B.sid_of(sandbox_id))

    def list(self, status: Union[str, Iterable[str], None] = None,
             label: Optional[str] = None) -> List[Sandbox]:
        """The caller's sandboxes (terminated ones included), optionally only those with
        ``status`` (a status or several) and/or ``label``."""
        return [self._wrap(s) for s in _filter(self._call(B.op_list()), status, label)]

    def update(self, sandbox_id: str, label: Optional[str] = None,
               public: Optional[bool] = None) -> Dict[str, Any]:
        """Change a sandbox's label and/or public flag."""
        return self._call(  # type: ignore[no-any-return]
            B.op_update(B.sid_of(sandbox_id), label, public))

    def delete(self, sandbox_id: str) -> Dict[str, Any]:
        """Delete (terminate) a sandbox: ``{id, status: "terminated"}``."""
        return self._call(B.op_delete(B.sid_of(sandbox_id)))  # type: ignore[no-any-return]

    def events(self, last_event_id: Optional[Union[int, str]] = None, *,
               sandbox: Optional[Any] = None, types: Optional[Sequence[str]] = None,
               timeout: Optional[float] = None, reconnect: bool = True,
               max_events: Optional[int] = None,
               since: Optional[float] = None) -> EventStream:
        """Events of the caller's sandboxes as they happen (SSE): an iterator of Event
        ``{id, type, container_id, timestamp, data}``. ``last_event_id`` resumes after that
        event (and the stream resumes by itself after a dropped connection). ``sandbox``
        and ``types`` filter; ``timeout`` ends the iteration after that many seconds
        without an event; ``max_events`` after that many events. Without
        ``last_event_id`` the stream starts with the oldest recorded event: ``since`` (a
        Unix time such as ``time.time()``) skips the older ones."""
        sid = None if sandbox is None else B.sid_of(sandbox)
        return EventStream(self, last_event_id, sid, types, timeout, reconnect, max_events,
                           since)

    # ---- snapshots and images ----

    def snapshots(self) -> List[Snapshot]:
        """The caller's snapshots."""
        return self._call(B.op_snapshots())  # type: ignore[no-any-return]

    def delete_snapshot(self, name: str) -> Dict[str, Any]:
        return self._call(B.op_delete_snapshot(name))  # type: ignore[no-any-return]

    def images(self) -> List[Image]:
        """The images in the daemon's store."""
        return self._call(B.op_images())  # type: ignore[no-any-return]

    def pull_image(self, image: str) -> Image:
        """Pull (or refresh) an image into the store."""
        return self._call(B.op_pull(image))  # type: ignore[no-any-return]

    def delete_image(self, ref: str) -> Dict[str, Any]:
        """Remove an image (admins; Conflict ``image_in_use`` while sandboxes use it)."""
        return self._call(B.op_delete_image(ref))  # type: ignore[no-any-return]

    def import_image(self, path: str, ref: Optional[str] = None) -> Image:
        """Import an OCI layout or archive from a path on the daemon's host (admins)."""
        return self._call(B.op_import_image(path, ref))  # type: ignore[no-any-return]

    # ---- tokens ----

    def create_token(self, name: Optional[str] = None, user: Optional[str] = None,
                     admin: Optional[bool] = None) -> NewToken:
        """A new token for the caller, or (admins) for ``user``, who is created if new
        (``admin`` sets the new user's role). ``.token`` is the secret, shown only now."""
        return self._call(B.op_create_token(name, user, admin))  # type: ignore

    def tokens(self, user: Optional[str] = None, all: bool = False) -> List[Token]:
        """The caller's tokens (admins: ``user``'s, or everyone's with ``all=True``)."""
        return self._call(B.op_tokens(user, all))  # type: ignore[no-any-return]

    def delete_token(self, token_id: str) -> Dict[str, Any]:
        """Revoke a token by its id (``tok_...``)."""
        return self._call(B.op_delete_token(token_id))  # type: ignore[no-any-return]

    # ---- the coroutine variants (defined once, in _AsyncClientOps) ----

    ahealth = _AsyncClientOps.health
    aready = _AsyncClientOps.ready
    ame = _AsyncClientOps.me
    aopenapi = _AsyncClientOps.openapi
    ametrics = _AsyncClientOps.metrics
    acreate = _AsyncClientOps.create
    aget = _AsyncClientOps.get
    alist = _AsyncClientOps.list
    aupdate = _AsyncClientOps.update
    adelete = _AsyncClientOps.delete
    aevents = _AsyncClientOps.events
    asnapshots = _AsyncClientOps.snapshots
    adelete_snapshot = _AsyncClientOps.delete_snapshot
    aimages = _AsyncClientOps.images
    apull_image = _AsyncClientOps.pull_image
    adelete_image = _AsyncClientOps.delete_image
    aimport_image = _AsyncClientOps.import_image
    acreate_token = _AsyncClientOps.create_token
    atokens = _AsyncClientOps.tokens
    adelete_token = _AsyncClientOps.delete_token


class AsyncSandboxer(_AsyncClientOps[AsyncSandbox]):
    """The asyncio client: the same operations as :class:`Sandboxer`, every one a
    coroutine; its sandboxes are :class:`AsyncSandbox` objects. Use it as
    ``async with AsyncSandboxer(...) as client:`` or call ``await client.aclose()``.

    The operations (``get``, ``list``, ``create``, ``events``, ...) are those of
    ``_AsyncClientOps``, which :class:`Sandboxer` has too with an ``a`` prefix."""

    def __init__(self, base_url: Optional[str] = None, token: Optional[str] = None, *,
                 socket: Optional[str] = None, timeout: Optional[float] = B.DEFAULT_TIMEOUT,
                 headers: Optional[Mapping[str, str]] = None) -> None:
        self._setup(base_url, token, socket, timeout, headers)
        self._client = self._new_async()

    @property
    def _async(self) -> httpx.AsyncClient:
        return self._client

    def _wrap(self, data: Mapping[str, Any]) -> AsyncSandbox:
        return AsyncSandbox(self, **dict(data))

    async def aclose(self) -> None:
        await self._client.aclose()

    close = aclose

    async def __aenter__(self) -> "AsyncSandboxer":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def from_snapshot(self, snapshot: str, label: Optional[str] = None,
                      **kwargs: Any) -> CreateCall[AsyncSandbox]:
        """A new sandbox started from a snapshot (its files, and its memory if kept)."""
        return self.create(None, label, None, snapshot=snapshot, **kwargs)  # type: ignore

    def sandbox(self, sandbox_id: str) -> AsyncSandbox:
        """A handle on a sandbox by id without fetching it (call ``refresh()`` to)."""
        return AsyncSandbox(self, B.sid_of(sandbox_id))
