#!/usr/bin/python3
"""Sandboxer's code interpreter server: Jupyter kernels (Debian's ipykernel, driven through
jupyter_client) behind the HTTP routes E2B's code interpreter serves on port 49999, so that
`@e2b/code-interpreter` and `e2b_code_interpreter` (runCode / run_code, contexts) work
against a sandbox made from the `code-interpreter` template.

  GET    /health                  "OK"
  POST   /execute                 {code, context_id?, language?, env_vars?} → application/x-ndjson:
                                  number_of_executions, stdout, stderr, result, error lines,
                                  keepalive every 5 s while nothing else comes, and always a
                                  last {"type": "end_of_execution"}
  POST   /contexts                {language?, cwd?} → {id, language, cwd}
  GET    /contexts                [{id, language, cwd}]
  DELETE /contexts/{id}           null (404 text if unknown)
  POST   /contexts/{id}/restart   null: the same context, a fresh kernel

Errors are plain text with a 4xx/5xx status, as E2B's server answers. Only Python kernels
exist here (the SDKs' other languages answer 400). Each context is one kernel; one execution
runs in a context at a time (others wait). The whole state lives in this process and its
kernels, so a fork or a hibernation of the sandbox keeps every context's variables.

Python standard library and jupyter_client only (Debian 12's packages).
"""
import datetime
import json
import os
import queue
import re
import shutil
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from jupyter_client.manager import KernelManager

PORT = int(os.environ.get("SANDBOXER_CI_PORT", "49999"))
KEEPALIVE_S = 5.0
KERNEL_READY_S = 60
MAX_BODY = 16 << 20
RUNTIME_DIR = "/tmp/.sandboxer-code-interpreter"
LANGUAGE_ALIASES = {"": "python", "python3": "python", "py": "python"}

# Result fields E2B's server gives a MIME type; the rest goes to "extra".
MIME_FIELDS = (("text/plain", "text"), ("text/html", "html"), ("text/markdown", "markdown"),
               ("image/svg+xml", "svg"), ("image/png", "png"), ("image/jpeg", "jpeg"),
               ("application/pdf", "pdf"), ("text/latex", "latex"),
               ("application/json", "json"), ("application/javascript", "javascript"),
               ("e2b/data", "data"), ("e2b/chart", "chart"))


def log(msg):
    print(f"code-interpreter: {msg}", file=sys.stderr, flush=True)


def default_cwd():
    """/home/user, as E2B's contexts start there (the kernels run as root)."""
    for d in ("/home/user", os.environ.get("HOME") or ""):
        if d and os.path.isdir(d):
            return d
    return os.getcwd()


class HTTPError(Exception):
    def __init__(self, status, text):
        super().__init__(text)
        self.status = status
        self.text = text


def iso(value):
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return value.isoformat()
    if isinstance(value, str):
        return value
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def result_line(data, main):
    """A display_data / execute_result bundle as E2B's result line."""
    data = dict(data)
    out = {"type": "result"}
    for mime, field in MIME_FIELDS:
        if mime in data:
            out[field] = data.pop(mime)
    text = out.get("text")
    if isinstance(text, str) and len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        out["text"] = text[1:-1]
    out["extra"] = data
    out["is_main_result"] = main
    return out


class Context:
    """One kernel and the client that talks to it."""

    def __init__(self, language, cwd):
        self.id = str(uuid.uuid4())
        self.language = language
        self.cwd = cwd
        self.lock = threading.Lock()  # one execution (or restart) at a time
        self.km = None
        self.kc = None

    def info(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def start(self):
        # ipc: the kernel's channels are unix sockets, no TCP port per context; their paths
        # absolute, since the kernel runs in the context's cwd and this server does not.
        sockets = os.path.join(RUNTIME_DIR, self.id)
        os.makedirs(sockets, mode=0o700, exist_ok=True)
        self.km = KernelManager(kernel_name="python3", transport="ipc",
                                ip=os.path.join(sockets, "kernel"))
        self.km.start_kernel(cwd=self.cwd, env=dict(os.environ, PYTHONUNBUFFERED="1",
                                                             PYDEVD_DISABLE_FILE_VALIDATION="1"))
        self.kc = self.km.client()
        self.kc.start_channels()
        try:
            self.kc.wait_for_ready(timeout=KERNEL_READY_S)
        except RuntimeError:
            self.shutdown()
            raise

    def shutdown(self):
        if self.kc is not None:
            self.kc.stop_channels()
        if self.km is not None:
            try:
                self.km.shutdown_kernel(now=True)
            except Exception as e:  # noqa: BLE001 - a dead kernel is shut down enough
                log(f"context {self.id}: shutdown: {e}")
            self.km.cleanup_resources()
        self.kc = self.km = None
        shutil.rmtree(os.path.join(RUNTIME_DIR, self.id), ignore_errors=True)

    def restart(self):
        with self.lock:
            self.shutdown()
            self.start()

    def alive(self):
        return self.km is not None and self.km.is_alive()

    def run_silent(self, code, timeout=30):
        """Run code without output or history; wait until the kernel is idle again."""
        msg_id = self.kc.execute(code, silent=True, store_history=False, allow_stdin=False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                msg = self.kc.get_iopub_msg(timeout=1)
            except queue.Empty:
                if not self.alive():
                    return
                continue
            if (msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "status"
                    and msg["content"].get("execution_state") == "idle"):
                break
        self.drain_shell()

    def drain_shell(self):
        try:
            while True:
                self.kc.get_shell_msg(timeout=0)
        except queue.Empty:
            pass

    def execute(self, code, env_vars):
        """Yield E2B's output lines for one execution (not end_of_execution: the caller adds
        it). The caller holds self.lock."""
        if env_vars:
            saved = "_sbx_env_saved_" + uuid.uuid4().hex[:8]
            self.run_silent(f"import os as _sbx_os\n{saved} = {{k: _sbx_os.environ.get(k) for k "
                            f"in {list(env_vars)!r}}}\n_sbx_os.environ.update({env_vars!r})")
        try:
            yield from self._execute(code)
        finally:
            if env_vars and self.alive():
                self.run_silent(f"for _k, _v in {saved}.items():\n"
                                f"    _sbx_os.environ.pop(_k, None) if _v is None else "
                                f"_sbx_os.environ.__setitem__(_k, _v)\n"
                                f"del {saved}, _k, _v")

    def _execute(self, code):
        msg_id = self.kc.execute(code, silent=False, store_history=True, allow_stdin=False,
                                 stop_on_error=True)
        errored = False
        quiet_since = time.monotonic()
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=1)
            except queue.Empty:
                if not self.alive():
                    yield from self._kernel_died()
                    return
                if time.monotonic() - quiet_since >= KEEPALIVE_S:
                    quiet_since = time.monotonic()
                    yield {"type": "keepalive"}
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            quiet_since = time.monotonic()
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content.get("execution_state") == "idle":
                break
            if kind == "execute_input":
                yield {"type": "number_of_executions",
                       "execution_count": content.get("execution_count")}
            elif kind == "stream":
                name = "stderr" if content.get("name") == "stderr" else "stdout"
                yield {"type": name, "text": content.get("text", ""),
                       "timestamp": iso(msg["header"].get("date"))}
            elif kind in ("execute_result", "display_data"):
                yield result_line(content.get("data", {}), kind == "execute_result")
            elif kind == "error" and not errored:
                errored = True
                yield {"type": "error", "name": content.get("ename", ""),
                       "value": content.get("evalue", ""),
                       "traceback": "\n".join(content.get("traceback", []))}
        reply = self._reply(msg_id)
        if reply and reply.get("status") == "error" and not errored:
            yield {"type": "error", "name": reply.get("ename", ""),
                   "value": reply.get("evalue", ""),
                   "traceback": "\n".join(reply.get("traceback", []))}
        elif reply and reply.get("status") == "aborted":
            yield {"type": "error", "name": "ExecutionAborted", "value": "Execution was aborted",
                   "traceback": ""}

    def _reply(self, msg_id):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                msg = self.kc.get_shell_msg(timeout=1)
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg["content"]
        return None

    def _kernel_died(self):
        log(f"context {self.id}: the kernel died; restarting it")
        yield {"type": "error", "name": "ContextRestarting", "value": "Context was restarted",
               "traceback": ""}
        self.shutdown()
        self.start()

    def interrupt(self):
        """The client went away mid-execution: stop the code so the next one can run."""
        try:
            self.km.interrupt_kernel()
        except Exception as e:  # noqa: BLE001
            log(f"context {self.id}: interrupt: {e}")
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                msg = self.kc.get_iopub_msg(timeout=1)
            except queue.Empty:
                continue
            if msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle":
                break
        self.drain_shell()


class Contexts:
    def __init__(self):
        self.lock = threading.Lock()
        self.by_id = {}
        self.default = {}  # language -> context id

    def create(self, language, cwd):
        ctx = Context(language, cwd)
        ctx.start()
        with self.lock:
            self.by_id[ctx.id] = ctx
        log(f"context {ctx.id}: {language} in {cwd}")
        return ctx

    def get(self, cid):
        with self.lock:
            return self.by_id.get(cid)

    def remove(self, cid):
        with self.lock:
            ctx = self.by_id.pop(cid, None)
            for lang, did in list(self.default.items()):
                if did == cid:
                    del self.default[lang]
        return ctx

    def default_for(self, language):
        with self.lock:
            ctx = self.by_id.get(self.default.get(language, ""))
        if ctx is not None:
            return ctx
        ctx = self.create(language, default_cwd())
        with self.lock:
            self.default.setdefault(language, ctx.id)
            return self.by_id[self.default[language]]

    def list(self):
        with self.lock:
            return [c.info() for c in self.by_id.values()]


CONTEXTS = Contexts()


def normalize_language(value):
    lang = (value or "").strip().lower()
    lang = LANGUAGE_ALIASES.get(lang, lang)
    if lang != "python":
        raise HTTPError(400, f"Language '{value}' is not available in this sandbox: its code "
                             "interpreter runs Python only")
    return lang


def string_map(value, field):
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise HTTPError(400, f"'{field}' must be an object of strings")
    return value


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sandboxer-code-interpreter"

    def log_message(self, fmt, *args):  # quiet: the sandbox's log is for real events
        pass

    # ---- plumbing

    def body_json(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise HTTPError(413, "Request body too large")
        raw = self.rfile.read(n) if n else b""
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except ValueError:
            raise HTTPError(400, "The body must be JSON") from None
        if not isinstance(body, dict):
            raise HTTPError(400, "The body must be a JSON object")
        return body

    def send(self, status, body, ctype="application/json"):
        data = body if isinstance(body, bytes) else (
            json.dumps(body).encode() if ctype == "application/json" else body.encode())
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Access-Control-Allow-Origin", "*")
        self.end_headers()
        self.wfile.write(data)

    def chunk(self, obj):
        data = (json.dumps(obj) + "\n").encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def route(self, method):
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        try:
            if method == "GET" and path == "/health":
                return self.send(200, "OK")
            if method == "POST" and path == "/execute":
                return self.execute()
            if path == "/contexts":
                if method == "POST":
                    return self.create_context()
                if method == "GET":
                    return self.send(200, CONTEXTS.list())
            m = re.fullmatch(r"/contexts/([^/]+)(/restart)?", path)
            if m and method == "DELETE" and not m.group(2):
                return self.delete_context(m.group(1))
            if m and method == "POST" and m.group(2):
                return self.restart_context(m.group(1))
            raise HTTPError(404, "Not Found")
        except HTTPError as e:
            self.send(e.status, e.text, "text/plain; charset=utf-8")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # noqa: BLE001 - answer 500 rather than drop the connection
            log(f"{method} {path}: {e!r}")
            self.send(500, str(e), "text/plain; charset=utf-8")

    def do_GET(self):
        self.route("GET")

    def do_POST(self):
        self.route("POST")

    def do_DELETE(self):
        self.route("DELETE")

    def do_OPTIONS(self):
        self.send_response(204)
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Access-Control-Allow-Methods", "*")
        self.send_header("Access-Control-Allow-Headers", "*")
        self.send_header("Content-Length", "0")
        self.end_headers()

    # ---- routes

    def create_context(self):
        body = self.body_json()
        language = normalize_language(body.get("language"))
        cwd = body.get("cwd") or default_cwd()
        if not isinstance(cwd, str) or not os.path.isdir(cwd):
            raise HTTPError(400, f"cwd '{cwd}' is not a directory in the sandbox")
        self.send(200, CONTEXTS.create(language, cwd).info())

    def delete_context(self, cid):
        ctx = CONTEXTS.remove(cid)
        if ctx is None:
            raise HTTPError(404, f"Context {cid} not found")
        with ctx.lock:
            ctx.shutdown()
        self.send(200, None)

    def restart_context(self, cid):
        ctx = CONTEXTS.get(cid)
        if ctx is None:
            raise HTTPError(404, f"Context {cid} not found")
        ctx.restart()
        self.send(200, None)

    def execute(self):
        body = self.body_json()
        code = body.get("code")
        if not isinstance(code, str):
            raise HTTPError(400, "'code' must be a string")
        cid, language = body.get("context_id"), body.get("language")
        if cid and language:
            raise HTTPError(400, "Only one of context_id or language can be provided")
        env_vars = string_map(body.get("env_vars"), "env_vars")
        if cid:
            ctx = CONTEXTS.get(cid)
            if ctx is None:
                raise HTTPError(404, f"Context {cid} not found")
        else:
            ctx = CONTEXTS.default_for(normalize_language(language))
        with ctx.lock:
            if ctx.kc is None:
                raise HTTPError(404, f"Context {ctx.id} not found")
            self.stream(ctx, code, env_vars)

    def stream(self, ctx, code, env_vars):
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        try:
            for item in ctx.execute(code, env_vars):
                self.chunk(item)
            self.chunk({"type": "end_of_execution"})
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
            ctx.interrupt()


def main():
    # The default Python context exists before the port listens: a client that reaches the
    # port can run code at once (and a warm pool's snapshot holds a started kernel).
    CONTEXTS.default_for("python")
    server = ThreadingHTTPServer(("0.0.0.0", PORT), Handler)
    server.daemon_threads = True
    log(f"listening on port {PORT}")
    server.serve_forever()


if __name__ == "__main__":
    main()
