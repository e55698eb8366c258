"""Sandboxer: isolated Linux sandboxes from OCI images, over HTTP.

    from sandboxer import Sandboxer

    client = Sandboxer("http://127.0.0.1:8000", token)      # or $SANDBOXER_URL/_TOKEN
    with client.create("busybox", label="work") as sb:      # deleted at the end
        print(sb.exec("echo hi; uname -a").stdout)
        child = sb.fork("try-1")
        sb.coalesce(child)

Everything blocking has a coroutine twin with an ``a`` prefix (``acreate``, ``aexec``, ...);
:class:`AsyncSandboxer` is the all-async client. Errors are :class:`SandboxerError`
subclasses (``NotFound``, ``InvalidRequest``, ``Conflict``, ...).
"""
from ._version import __version__
from .client import AsyncSandboxer, CreateCall, Sandboxer
from .errors import (APIError, BadGateway, CommandFailed, Conflict, ConnectionFailed,
                     Forbidden, InvalidRequest, LimitExceeded, MethodNotAllowed, NotFound,
                     PayloadTooLarge, SandboxerError, SandboxNotFound, SandboxNotRunning,
                     ServerError, ServiceUnavailable, StreamError, TerminalError, Timeout,
                     Unauthorized, UnprocessableEntity)
from .models import (Event, ExecChunk, ExecResult, Execution, ExecutionLog, ExecutionLogPage,
                     FileInfo, Image, NewToken, Snapshot, Token, Tree, TreeNode, User)
from .processes import AsyncProcess, OutputChunk, Process, ProcessOutput
from .sandbox import AsyncSandbox, Sandbox
from .streams import (AsyncByteStream, AsyncEventStream, AsyncExecStream, AsyncTextStream,
                      ByteStream, EventStream, ExecStream, TextStream)
from .terminal import Terminal

__all__ = [
    "__version__",
    "Sandboxer", "AsyncSandboxer", "Sandbox", "AsyncSandbox", "CreateCall", "Terminal",
    "Process", "AsyncProcess", "OutputChunk", "ProcessOutput",
    "ExecResult", "ExecChunk", "Execution", "ExecutionLog", "ExecutionLogPage", "FileInfo",
    "Event", "Tree", "TreeNode", "Snapshot", "Image", "Token", "NewToken", "User",
    "ExecStream", "AsyncExecStream", "ByteStream", "AsyncByteStream", "TextStream",
    "AsyncTextStream", "EventStream", "AsyncEventStream",
    "SandboxerError", "APIError", "InvalidRequest", "Unauthorized", "Forbidden", "NotFound",
    "SandboxNotFound", "MethodNotAllowed", "Conflict", "SandboxNotRunning", "PayloadTooLarge",
    "UnprocessableEntity", "LimitExceeded", "ServerError", "BadGateway", "ServiceUnavailable",
    "ConnectionFailed", "Timeout", "StreamError", "CommandFailed", "TerminalError",
]
