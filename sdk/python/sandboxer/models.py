"""Result types: plain ``dict`` subclasses with typed attribute access.

Each model is the JSON object the daemon answered, so ``result["stdout"]`` and
``json.dumps(result)`` work, and also has typed attributes (``result.stdout``) for editors
and type checkers. An annotated field missing from the answer reads as ``None``.
"""
from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Set

from .errors import CommandFailed

__all__ = [
    "Model",
    "ExecResult",
    "ExecChunk",
    "Execution",
    "ExecutionLog",
    "ExecutionLogPage",
    "FileInfo",
    "Event",
    "Tree",
    "TreeNode",
    "Snapshot",
    "Image",
    "Token",
    "NewToken",
    "User",
]


def _annotated(cls: type) -> Set[str]:
    names: Set[str] = set()
    for klass in cls.__mro__:
        names.update(getattr(klass, "__annotations__", {}))
    return names


class Model(Dict[str, Any]):
    """A JSON object with attribute access to its keys."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            if name in _annotated(type(self)):
                return None
            raise AttributeError(f"{type(self).__name__} has no field {name!r}") from None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict.__repr__(self)})"


class ExecResult(Model):
    """What a command did: ``{stdout, stderr, exit_code, truncated, timed_out, execution_id}``.

    ``stdout``/``stderr`` are text (invalid UTF-8 replaced); ``truncated`` is true when the
    daemon kept only the first ``--exec-output-max`` bytes of a stream; ``timed_out`` when
    the command was killed at its ``timeout``.
    """

    stdout: str
    stderr: str
    exit_code: int
    truncated: bool
    timed_out: bool
    execution_id: int

    @property
    def ok(self) -> bool:
        """True when the command exited with 0."""
        return self.get("exit_code") == 0

    @property
    def output(self) -> str:
        """stdout followed by stderr."""
        return (self.get("stdout") or "") + (self.get("stderr") or "")

    def check(self) -> "ExecResult":
        """Return self, or raise :class:`~sandboxer.CommandFailed` on a non-zero exit."""
        if self.get("exit_code") != 0:
            raise CommandFailed(self)
        return self


class ExecChunk(Model):
    """One line of an exec stream.

    ``type`` is ``"stdout"``, ``"stderr"`` (``output`` holds the text, ``exit_code`` is -1)
    or ``"exit"`` (the last one: ``exit_code`` and ``timed_out``). An ``"error"`` line is
    raised as :class:`~sandboxer.StreamError` instead of being yielded.
    """

    type: str
    output: str
    exit_code: int
    timed_out: bool
    code: str

    @property
    def is_exit(self) -> bool:
        return self.get("type") == "exit"


class ExecutionLog(Model):
    """One chunk of an execution's output: ``{id, fd, content, created_at}``."""

    id: int
    fd: str
    content: str
    created_at: float


class Execution(Model):
    """One recorded execution: ``{id, command, executed_at, finished_at, exit_code, logs}``."""

    id: int
    command: str
    executed_at: float
    finished_at: Optional[float]
    exit_code: Optional[int]
    logs: List[ExecutionLog]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if isinstance(self.get("logs"), list):
            self["logs"] = [ExecutionLog(x) for x in self["logs"]]

    @property
    def stdout(self) -> str:
        return "".join(x.get("content", "") for x in self.get("logs") or []
                       if x.get("fd") == "stdout")

    @property
    def stderr(self) -> str:
        return "".join(x.get("content", "") for x in self.get("logs") or []
                       if x.get("fd") == "stderr")


class ExecutionLogPage(Model):
    """``{execution, logs, next_start_id}``: pass ``next_start_id`` as ``start_id`` to tail."""

    execution: Execution
    logs: List[ExecutionLog]
    next_start_id: int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if isinstance(self.get("execution"), dict):
            self["execution"] = Execution(self["execution"])
        if isinstance(self.get("logs"), list):
            self["logs"] = [ExecutionLog(x) for x in self["logs"]]


class FileInfo(Model):
    """A file or directory inside a sandbox: ``{name, path, type, is_dir, size, mode, mtime}``.

    ``mode`` is an octal string such as ``"0644"``; ``type`` is ``file``, ``dir``,
    ``symlink``, ...
    """

    name: str
    path: str
    type: str
    is_dir: bool
    size: int
    mode: str
    mtime: float


class Event(Model):
    """A sandbox event: ``{id, type, container_id, timestamp, data}``.

    ``id`` is the SSE event id (pass it as ``last_event_id`` to resume); ``type`` is one of
    created, exec, forked, coalesced, paused, unpaused, hibernated, woken, updated, exited,
    deleted, process_started, process_deleted; ``data`` holds its details (e.g. ``child_id``
    of ``forked``, ``pid`` of the process ones).
    """

    id: int
    type: str
    container_id: str
    timestamp: float
    data: Dict[str, Any]

    @property
    def sandbox_id(self) -> str:
        return self.get("container_id", "")


class TreeNode(Model):
    """A node of a fork tree: ``{id, name, label, status, children}``."""

    id: str
    name: str
    label: str
    status: str
    children: List["TreeNode"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self["children"] = [TreeNode(c) for c in self.get("children") or []]

    def walk(self) -> Iterator["TreeNode"]:
        """This node and every descendant, depth first."""
        yield self
        for c in self["children"]:
            yield from c.walk()

    def ids(self) -> List[str]:
        return [n["id"] for n in self.walk()]


class Tree(Model):
    """``{tree, tree_json}``: ASCII art and the structure of a sandbox's fork tree."""

    tree: str
    tree_json: TreeNode

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if isinstance(self.get("tree_json"), dict):
            self["tree_json"] = TreeNode(self["tree_json"])

    @property
    def text(self) -> str:
        """The ASCII rendering (``✗`` marks terminated nodes)."""
        return self.get("tree", "")

    @property
    def root(self) -> TreeNode:
        node: TreeNode = self["tree_json"]
        return node

    def __str__(self) -> str:
        return self.text


class Snapshot(Model):
    """``{id, name, source_id, image, memory_preserved, created_at}``."""

    id: str
    name: str
    source_id: str
    image: str
    memory_preserved: bool
    created_at: float


class Image(Model):
    """``{ref, digest, size, created_at, pulled_at}``."""

    ref: str
    digest: str
    size: int
    created_at: float
    pulled_at: float


class Token(Model):
    """``{id, name, user, created_at, last_used_at}`` (never the secret)."""

    id: str
    name: str
    user: str
    created_at: float
    last_used_at: Optional[float]


class NewToken(Token):
    """A token just created: also ``token`` (the secret, shown only once) and ``admin``."""

    token: str
    admin: bool


class User(Model):
    """``GET /auth/me``: ``{id, name, admin, created_at, token: {id, name}}``."""

    id: int
    name: str
    admin: bool
    created_at: float
    token: Dict[str, Any]
