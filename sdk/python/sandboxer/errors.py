"""Typed exceptions.

Every error the daemon answers is JSON ``{"detail": "...", "code": "..."}`` with an HTTP
status; the SDK raises the subclass of :class:`APIError` that fits the status (and, for a
few codes, a narrower one), carrying ``status``, ``code`` and ``detail``::

    try:
        sb.read_file("/nope")
    except sandboxer.NotFound as e:
        print(e.status, e.code, e.detail)     # 404 file_not_found stat /nope: No such ...

All of them derive from :class:`SandboxerError`. HTTP answers also derive from
``httpx.HTTPStatusError`` (what ``response.raise_for_status()`` raises), so code written for
a plain-httpx client keeps catching them.
"""
from __future__ import annotations

import json
from typing import Any, Dict, Optional, Type

import httpx

__all__ = [
    "SandboxerError",
    "APIError",
    "InvalidRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "SandboxNotFound",
    "MethodNotAllowed",
    "Conflict",
    "SandboxNotRunning",
    "PayloadTooLarge",
    "UnprocessableEntity",
    "LimitExceeded",
    "ServerError",
    "BadGateway",
    "ServiceUnavailable",
    "ConnectionFailed",
    "Timeout",
    "StreamError",
    "CommandFailed",
    "TerminalError",
    "error_from_response",
]


class SandboxerError(Exception):
    """The base of every error this SDK raises.

    ``status`` is the HTTP status (0 when there was no HTTP answer), ``code`` the daemon's
    machine code (``sandbox_not_found``, ``invalid_field``, ...) and ``detail`` its sentence.
    """

    status: int
    code: str
    detail: str

    def __init__(self, status: int = 0, code: str = "error", detail: str = "") -> None:
        self.status = status
        self.code = code
        self.detail = detail or code
        Exception.__init__(self, self._message())

    def _message(self) -> str:
        if self.status:
            return f"{self.status} {self.code}: {self.detail}"
        return f"{self.code}: {self.detail}"

    def __reduce__(self) -> Any:
        return (type(self), (self.status, self.code, self.detail))


class APIError(SandboxerError, httpx.HTTPStatusError):
    """The daemon answered with an error status. ``response`` is the ``httpx.Response``."""

    def __init__(self, status: int, code: str, detail: str = "",
                 response: Optional[httpx.Response] = None) -> None:
        SandboxerError.__init__(self, status, code, detail)
        self.response = response  # type: ignore[assignment]
        request: Optional[httpx.Request] = None
        if response is not None:
            try:
                request = response.request
            except RuntimeError:
                request = None
        self._request = request

    def __reduce__(self) -> Any:
        return (type(self), (self.status, self.code, self.detail))


class InvalidRequest(APIError):
    """400: malformed JSON, a wrong type, an unknown field, a bad path, ..."""


class Unauthorized(APIError):
    """401: no token, or a wrong or revoked one."""


class Forbidden(APIError):
    """403: an admin-only route, or a file the sandbox's user may not touch."""


class NotFound(APIError):
    """404: no such sandbox (also another owner's), file, snapshot, token, image, ..."""


class SandboxNotFound(NotFound):
    """404 ``sandbox_not_found``."""


class MethodNotAllowed(APIError):
    """405: the path exists, not with this method."""


class Conflict(APIError):
    """409: the object is in the wrong state (paused, terminated, busy, exists, ...)."""


class SandboxNotRunning(Conflict):
    """409 ``sandbox_not_running`` / ``sandbox_terminated`` / ``sandbox_paused``."""


class PayloadTooLarge(APIError):
    """413: the body (or a value in it) is over the daemon's limit."""


class UnprocessableEntity(APIError):
    """422: well-formed but unusable, e.g. an image that cannot be pulled."""


class LimitExceeded(APIError):
    """429: too many concurrent execs, the agent is busy, no addresses left, ..."""


class ServerError(APIError):
    """500 (or any other 5xx not listed): the daemon or the runtime failed."""


class BadGateway(APIError):
    """502/504: the sandbox's own server did not answer properly (through the proxy)."""


class ServiceUnavailable(APIError):
    """503: the daemon is not ready, or is stopping."""


class ConnectionFailed(SandboxerError):
    """The daemon could not be reached (refused, reset, DNS, unix socket missing)."""

    def __init__(self, detail: str = "", code: str = "connection_failed") -> None:
        SandboxerError.__init__(self, 0, code, detail)

    def __reduce__(self) -> Any:
        return (type(self), (self.detail, self.code))


class Timeout(ConnectionFailed):
    """No answer within the client-side timeout."""

    def __init__(self, detail: str = "", code: str = "timeout") -> None:
        ConnectionFailed.__init__(self, detail, code)


class StreamError(SandboxerError):
    """A stream (exec ndjson, events) reported an error or broke off in the middle."""


class CommandFailed(SandboxerError):
    """Raised by ``ExecResult.check()`` (and ``exec(..., check=True)``) on a non-zero exit."""

    def __init__(self, result: Any) -> None:
        self.result = result
        exit_code = result.get("exit_code") if isinstance(result, dict) else None
        stderr = (result.get("stderr") or "") if isinstance(result, dict) else ""
        tail = stderr.strip().splitlines()[-1:] if stderr.strip() else []
        detail = f"exited with code {exit_code}" + (f": {tail[0]}" if tail else "")
        SandboxerError.__init__(self, 0, "command_failed", detail)

    @property
    def exit_code(self) -> Optional[int]:
        return self.result.get("exit_code") if isinstance(self.result, dict) else None

    def __reduce__(self) -> Any:
        return (type(self), (self.result,))


class TerminalError(SandboxerError):
    """A terminal WebSocket could not be opened or broke."""


_BY_STATUS: Dict[int, Type[APIError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    413: PayloadTooLarge,
    422: UnprocessableEntity,
    429: LimitExceeded,
    500: ServerError,
    502: BadGateway,
    503: ServiceUnavailable,
    504: BadGateway,
}

_BY_CODE: Dict[str, Type[APIError]] = {
    "sandbox_not_found": SandboxNotFound,
    "sandbox_not_running": SandboxNotRunning,
    "sandbox_terminated": SandboxNotRunning,
    "sandbox_paused": SandboxNotRunning,
}


def error_class(status: int, code: str) -> Type[APIError]:
    """The exception class for an HTTP status and a daemon code."""
    cls = _BY_CODE.get(code)
    if cls is not None and issubclass(cls, _BY_STATUS.get(status, APIError)):
        return cls
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if status >= 500:
        return ServerError
    return APIError


def parse_error_body(status: int, body: bytes, reason: str = "") -> "tuple[str, str]":
    """(code, detail) from an error body; tolerant of non-JSON bodies (e.g. a proxy's)."""
    code, detail = "", ""
    try:
        data = json.loads(body.decode("utf-8", "replace")) if body else None
        if isinstance(data, dict):
            code = str(data.get("code") or "")
            detail = str(data.get("detail") or "")
    except ValueError:
        detail = body[:500].decode("utf-8", "replace").strip()
    if not code:
        code = {400: "invalid", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                409: "conflict", 413: "too_large", 422: "unprocessable", 429: "limit",
                503: "unavailable"}.get(status, "http_error")
    return code, detail or reason or f"HTTP {status}"


def error_from_response(response: httpx.Response) -> APIError:
    """The typed exception for an error response whose body has been read."""
    code, detail = parse_error_body(response.status_code, response.content,
                                    response.reason_phrase)
    return error_class(response.status_code, code)(response.status_code, code, detail, response)
