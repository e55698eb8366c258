"""Interactive terminals over WebSocket: ``Sandbox.pty()`` and ``Sandbox.attach()``.

Uses the ``websocket-client`` package (Debian: python3-websocket), imported only when a
terminal is opened. A background thread reads the socket (answering the daemon's pings),
so output is never lost while you are busy; read it with :meth:`Terminal.recv`,
:meth:`Terminal.read_until` or by iterating.

    with sb.pty(cols=120, rows=40) as term:
        term.send("ls /\\n")
        print(term.read_until("$ ").decode())
        term.send("exit 3\\n")
        assert term.wait(timeout=10) == 3
"""
from __future__ import annotations

import json
import queue
import socket as socketlib
import struct
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Union

from .errors import ConnectionFailed, TerminalError, Timeout, error_class, parse_error_body

__all__ = ["Terminal"]

_CLOSED = object()


class Terminal:
    """One terminal session (a PTY in the sandbox, or the console of its main process).

    Attributes set when the daemon closes the session: ``close_code`` (1000 when the process
    ended, 1001 on idle timeout or daemon stop, 1011 when the sandbox went away),
    ``close_reason``, and from a 1000 close ``exit_code`` and ``signal``.
    """

    def __init__(self, ws: Any, url: str) -> None:
        self._ws = ws
        self.url = url
        self.close_code: Optional[int] = None
        self.close_reason: Optional[str] = None
        self.exit_code: Optional[int] = None
        self.signal: Optional[Union[int, str]] = None
        self._q: "queue.Queue[Any]" = queue.Queue()
        self._pending = bytearray()
        self._eof = False
        self._done = threading.Event()
        self._send_lock = threading.Lock()
        self._error: Optional[BaseException] = None
        self._reader = threading.Thread(target=self._read_loop, name="sandboxer-terminal",
                                        daemon=True)
        self._reader.start()

    # ---- opening ----

    @classmethod
    def connect(cls, url: str, token: Optional[str], unix_socket: Optional[str] = None,
                timeout: float = 30.0) -> "Terminal":
        try:
            import websocket  # type: ignore[import]  # websocket-client (no type hints)
        except ImportError as e:  # pragma: no cover - depends on the installation
            raise TerminalError(0, "missing_dependency",
                                "terminals need the websocket-client package "
                                "(pip install websocket-client, or apt install "
                                "python3-websocket)") from e
        header: List[str] = []
        if token:
            header.append(f"Authorization: Bearer {token}")
        opts: Dict[str, Any] = {"timeout": timeout, "header": header,
                                "enable_multithread": True}
        if unix_socket:
            s = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
            s.settimeout(timeout)
            try:
                s.connect(unix_socket)
            except OSError as e:
                s.close()
                raise ConnectionFailed(f"{unix_socket}: {e}") from e
            opts["socket"] = s
        try:
            ws = websocket.create_connection(url, **opts)
        except websocket.WebSocketBadStatusException as e:
            status = int(getattr(e, "status_code", 0) or 0)
            body = getattr(e, "resp_body", None) or b""
            if isinstance(body, str):
                body = body.encode()
            code, detail = parse_error_body(status, body)
            raise error_class(status, code)(status, code, detail) from e
        except websocket.WebSocketTimeoutException as e:
            raise Timeout(f"opening {url}: {e}") from e
        except (OSError, websocket.WebSocketException) as e:
            raise ConnectionFailed(f"opening {url}: {e}") from e
        ws.settimeout(None)  # the reader thread blocks; close() unblocks it
        return cls(ws, url)

    # ---- the reader ----

    def _read_loop(self) -> None:
        import websocket
        try:
            while True:
                op, frame = self._ws.recv_data_frame(control_frame=True)
                data = getattr(frame, "data", frame)
                if op == websocket.ABNF.OPCODE_BINARY:
                    self._q.put(bytes(data))
                elif op == websocket.ABNF.OPCODE_TEXT:
                    self._q.put(data.encode() if isinstance(data, str) else bytes(data))
                elif op == websocket.ABNF.OPCODE_CLOSE:
                    self._on_close(bytes(data or b""))
                    break
        except Exception as e:  # the socket broke or was shut down by close()
            if self.close_code is None and not self._done.is_set():
                self._error = e
        finally:
            self._done.set()
            self._q.put(_CLOSED)
            try:
                self._ws.shutdown()
            except Exception:
                pass

    def _on_close(self, data: bytes) -> None:
        self.close_code = struct.unpack("!H", data[:2])[0] if len(data) >= 2 else 1005
        self.close_reason = data[2:].decode("utf-8", "replace")
        try:
            info = json.loads(self.close_reason) if self.close_reason else None
        except ValueError:
            info = None
        if isinstance(info, dict):
            self.exit_code = info.get("exit_code")
            self.signal = info.get("signal")

    # ---- input ----

    def send(self, data: Union[str, bytes]) -> None:
        """Type into the terminal (a binary frame)."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        self._send(data, binary=True)

    def sendline(self, line: str = "") -> None:
        self.send(line + "\n")

    def resize(self, cols: int, rows: int) -> None:
        """Change the terminal's size (a text frame ``{"resize":{"cols","rows"}}``)."""
        self._send(json.dumps({"resize": {"cols": int(cols), "rows": int(rows)}}), binary=False)

    def _send(self, data: Union[str, bytes], binary: bool) -> None:
        import websocket
        if self.closed:
            raise TerminalError(0, "session_closed", "the terminal session has ended")
        try:
            with self._send_lock:
                if binary:
                    self._ws.send_binary(data)
                else:
                    self._ws.send(data)
        except (OSError, websocket.WebSocketException) as e:
            raise TerminalError(0, "session_closed", f"sending: {e}") from e

    # ---- output ----

    @property
    def closed(self) -> bool:
        """True once the session has ended (the daemon closed it, or close() was called)."""
        return self._done.is_set()

    def recv(self, timeout: Optional[float] = None) -> bytes:
        """The next output bytes; b"" once the session has ended and all output was read.
        Raises :class:`~sandboxer.Timeout` when nothing comes within ``timeout`` seconds."""
        if self._pending:
            out = bytes(self._pending)
            self._pending.clear()
            return out
        if self._eof:
            return b""
        try:
            item = self._q.get(timeout=timeout)
        except queue.Empty:
            raise Timeout(f"no terminal output within {timeout} s") from None
        if item is _CLOSED:
            self._eof = True
            return b""
        return item  # type: ignore[no-any-return]

    def read_until(self, marker: Union[str, bytes], timeout: float = 30.0) -> bytes:
        """Output up to and including ``marker``; what follows it stays for the next read.
        Raises :class:`~sandboxer.Timeout` (or TerminalError if the session ends first)."""
        if isinstance(marker, str):
            marker = marker.encode("utf-8")
        deadline = time.monotonic() + timeout
        buf = bytearray(self._pending)
        self._pending.clear()
        while True:
            i = buf.find(marker)
            if i >= 0:
                end = i + len(marker)
                self._pending[:] = buf[end:]
                return bytes(buf[:end])
            left = deadline - time.monotonic()
            if left <= 0:
                self._pending[:] = buf
                raise Timeout(f"{marker!r} did not show up within {timeout} s; "
                              f"last output: {bytes(buf[-300:])!r}")
            try:
                chunk = self.recv(timeout=left)
            except Timeout:
                continue
            if not chunk:
                self._pending[:] = buf
                raise TerminalError(0, "session_closed",
                                    f"the session ended before {marker!r} showed up "
                                    f"(close {self.close_code} {self.close_reason!r}); "
                                    f"last output: {bytes(buf[-300:])!r}")
            buf += chunk

    def read_all(self, timeout: float = 30.0) -> bytes:
        """Every output byte until the session ends (or ``timeout`` passes)."""
        deadline = time.monotonic() + timeout
        out = bytearray()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(out)
            try:
                chunk = self.recv(timeout=left)
            except Timeout:
                return bytes(out)
            if not chunk:
                return bytes(out)
            out += chunk

    def __iter__(self) -> Iterator[bytes]:
        """Output chunks until the session ends."""
        while True:
            chunk = self.recv()
            if not chunk:
                return
            yield chunk

    def wait(self, timeout: Optional[float] = 30.0) -> Optional[int]:
        """Wait for the session to end (keeping its output for recv) and return the
        process's exit code (None if the session ended without one, e.g. on idle timeout).
        Raises :class:`~sandboxer.Timeout` if it does not end within ``timeout``."""
        if not self._done.wait(timeout):
            raise Timeout(f"the terminal session did not end within {timeout} s")
        return self.exit_code

    # ---- closing ----

    def close(self, timeout: float = 3.0) -> None:
        """End the session from this side (for attach: detach, the process keeps running)."""
        if not self._done.is_set():
            try:
                with self._send_lock:
                    self._ws.send_close()
            except Exception:
                pass
            self._done.wait(timeout)
        try:
            self._ws.shutdown()
        except Exception:
            pass
        self._done.set()
        self._reader.join(timeout)

    def __enter__(self) -> "Terminal":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self._done.is_set():
                self._ws.shutdown()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "open" if not self.closed else f"closed {self.close_code}"
        return f"<Terminal {self.url} {state} exit_code={self.exit_code}>"
