#!/usr/bin/env python3
"""A code interpreter: Python cells run in a sandbox, with state kept between calls.

This is the tool an AI agent calls as "run this Python": each call gets back stdout,
stderr, the value of the last expression (as Jupyter shows it) and the error, if any, while
variables, imports and functions defined by earlier calls stay available.

How the state is kept: a small REPL server (standard library only) runs as a long-lived
Python process inside the sandbox, listening on 127.0.0.1:7777 *inside* the sandbox (nothing
is exposed outside it). ``run(code)`` is one exec of a tiny client whose stdin is the cell;
the server executes the cell in one persistent namespace and answers JSON. Because the state
is a real process's memory, it also survives ``hibernate()``/``wake()`` (CRIU writes the
process to disk and restores it) and is copied by ``fork()`` — both are shown below. A cell
that runs too long is interrupted (SIGINT, as Ctrl-C in a notebook) without losing the
state; ``restart()`` starts a fresh interpreter.

Run it against a daemon::

    export SANDBOXER_URL=http://127.0.0.1:8000 SANDBOXER_TOKEN=sbx_...
    python3 examples/code_interpreter.py
    python3 examples/code_interpreter.py --repl      # type cells yourself (end a cell
                                                     # with an empty line)

Environment: ``SANDBOXER_URL``, ``SANDBOXER_TOKEN``; ``SANDBOXER_IMAGE``: an image with
python3 (default ``python``).
"""
import json
import os
import sys
import time

try:
    import sandboxer
except ImportError:  # running from a checkout without installing the SDK
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk",
                                    "python"))
    import sandboxer

IMAGE = os.environ.get("SANDBOXER_IMAGE", "python")
PORT = 7777

SERVER = r'''
import ast, contextlib, io, json, linecache, os, signal, socket, traceback

# started with & from sh, SIGINT would be ignored: make it raise KeyboardInterrupt
signal.signal(signal.SIGINT, signal.default_int_handler)
ns = {"__name__": "__main__"}

cells = 0

def run_cell(code):
    global cells
    cells += 1
    name = f"<cell {cells}>"
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    out, err = io.StringIO(), io.StringIO()
    result = error = None
    try:
        tree = ast.parse(code, name, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            exec(compile(tree, name, "exec"), ns)
            if last is not None:
                value = eval(compile(last, name, "eval"), ns)
                if value is not None:
                    ns["_"] = value
                    result = repr(value)
    except BaseException as e:  # KeyboardInterrupt (an interrupt) and SystemExit too
        only = "".join(traceback.format_exception_only(type(e), e))
        error = only.strip()
        frames = [f for f in traceback.extract_tb(e.__traceback__)
                  if f.filename.startswith("<cell ")]
        err.write("Traceback (most recent call last):\n" +
                  "".join(traceback.format_list(frames)) + only)
    return {"stdout": out.getvalue(), "stderr": err.getvalue(), "result": result,
            "error": error}

srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", PORT))
srv.listen(8)
with open("/tmp/interp.pid", "w") as f:
    f.write(str(os.getpid()))
while True:
    try:
        conn, _ = srv.accept()
        with conn:
            data = b""
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            reply = run_cell(data.decode())
            conn.sendall(json.dumps(reply).encode())
    except (OSError, KeyboardInterrupt):
        continue  # the client went away (e.g. after an interrupt): serve the next cell
'''.replace("PORT", str(PORT))

CLIENT = r'''
import socket, sys
s = socket.create_connection(("127.0.0.1", PORT))
s.sendall(sys.stdin.buffer.read())
s.shutdown(socket.SHUT_WR)
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
sys.stdout.write(data.decode())
'''.replace("PORT", str(PORT))


class CodeInterpreter:
    """A persistent Python interpreter in a sandbox. Use as a context manager."""

    def __init__(self, client, image=IMAGE, sandbox=None, running=False):
        self.client = client
        self.sb = sandbox or client.create(image, label="code-interpreter",
                                           args=["sleep", "infinity"])
        self.running = running

    def start(self, timeout=30):
        """Install and start the REPL server (unless it already runs)."""
        if self.running:
            return self
        self.sb.write_file("/opt/interp/server.py", SERVER, mkdir=True)
        self.sb.write_file("/opt/interp/client.py", CLIENT)
        # in the background, in its own session: it outlives the exec that starts it
        self.sb.exec("setsid python3 -u /opt/interp/server.py >/tmp/interp.log 2>&1 "
                     "</dev/null &", check=True)
        deadline = time.monotonic() + timeout
        while True:
            r = self.sb.exec(["python3", "/opt/interp/client.py"], stdin="None", timeout=10)
            if r.ok:
                self.running = True
                return self
            if time.monotonic() > deadline:
                log = self.sb.exec("cat /tmp/interp.log").stdout
                raise RuntimeError(f"the interpreter did not start: {r.stderr}{log}")
            time.sleep(0.1)

    def run(self, code, timeout=30):
        """Run a cell: {stdout, stderr, result, error}."""
        r = self.sb.exec(["python3", "/opt/interp/client.py"], stdin=code, timeout=timeout)
        if r.timed_out:
            self.interrupt()
            return {"stdout": "", "stderr": "", "result": None,
                    "error": f"TimeoutError: interrupted after {timeout} s"}
        if not r.ok:
            raise RuntimeError(f"the interpreter is not answering: {r.stderr.strip()}")
        return json.loads(r.stdout)

    def interrupt(self):
        """Ctrl-C for the running cell (KeyboardInterrupt in the interpreter)."""
        self.sb.exec("kill -INT $(cat /tmp/interp.pid)")

    def restart(self):
        """A fresh interpreter: every variable is gone."""
        self.sb.exec("kill $(cat /tmp/interp.pid); rm -f /tmp/interp.pid")
        self.running = False
        time.sleep(0.2)
        return self.start()

    def fork(self):
        """A second interpreter with a copy of this one's state: the forked sandbox has the
        same running process (where the daemon could carry memory over; else a fresh one)."""
        child = self.sb.fork(label="code-interpreter-fork")
        return CodeInterpreter(self.client, sandbox=child, running=bool(child.memory_preserved))

    def close(self):
        self.sb.terminate()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()


def show(n, code, out):
    print(f"[{n}] >>> " + code.strip().replace("\n", "\n    ... "))
    if out["stdout"]:
        print("    " + out["stdout"].rstrip().replace("\n", "\n    "))
    if out["result"] is not None:
        print(f"    -> {out['result']}")
    if out["error"]:
        print(f"    !! {out['error']}")


def demo(interp):
    cells = [
        "import math\nx = 21\nprint('x is', x)",
        "y = math.sqrt(x * x * 4)\ny",
        "def area(r):\n    return math.pi * r ** 2\n[round(area(r), 2) for r in range(1, 4)]",
        "1 / 0",
        "counter = 0\nfor _ in range(10**5):\n    counter += 1\ncounter",
    ]
    n = 0
    for code in cells:
        n += 1
        show(n, code, interp.run(code))

    n += 1
    code = "while True:\n    counter += 1"
    show(n, code, interp.run(code, timeout=2))
    n += 1  # the state survived the interrupt (and the loop did run until it)
    show(n, "x * 2, counter > 10**5", interp.run("x * 2, counter > 10**5"))

    interp.sb.hibernate()
    print(f"hibernated: {interp.client.get(interp.sb.id).status}")
    interp.sb.wake()
    n += 1
    show(n, "x, area(1) > 3", interp.run("x, area(1) > 3"))  # memory came back from disk

    with interp.fork() as other:  # the fork has the same live state, then diverges
        other_out = other.run("x = 100\nx")
        mine = interp.run("x")
        print(f"fork: x = {other_out['result']} there, x = {mine['result']} here")


def repl(interp):
    print("Python in a sandbox; end a cell with an empty line, Ctrl-D to quit.")
    n = 0
    while True:
        lines = []
        try:
            while True:
                line = input("... " if lines else ">>> ")
                if not line and lines:
                    break
                if line:
                    lines.append(line)
        except EOFError:
            print()
            return
        n += 1
        out = interp.run("\n".join(lines))
        if out["stdout"]:
            print(out["stdout"], end="")
        if out["result"] is not None:
            print(out["result"])
        if out["error"]:
            print(out["stderr"] or out["error"], end="" if out["stderr"] else "\n")


def main():
    client = sandboxer.Sandboxer()
    with CodeInterpreter(client) as interp:
        print(f"interpreter in sandbox {interp.sb.id[:12]} ({IMAGE})")
        if "--repl" in sys.argv[1:]:
            repl(interp)
        else:
            demo(interp)
    print("sandbox deleted")
    client.close()


if __name__ == "__main__":
    main()
