#!/usr/bin/python3
"""Interactive terminals: opening one and a keystroke's echo, Sandboxer's WebSocket terminal
against `runc exec -t` and `podman exec -it`, in one run, on the same machine and the same
busybox test image (tests/images/build.py). The command is `cat` on a terminal of 80x24, in
one already running container per tool (a Sandboxer sandbox, a bare runc container and a
podman container, each idling in `sleep`).

  terminal open    Sandboxer: from the start of the WebSocket handshake of GET
                   /sandboxes/{id}/exec/pty?cmd=cat&cols=80&rows=24 (TCP connect included;
                   Bearer token, 127.0.0.1) until `cat` runs: the marker line `ready-<n>\\n`
                   is sent as a binary frame right after the 101 and the clock stops when it
                   has come back twice, the terminal's echo and cat's copy of it (which shows
                   cat read it). The WebSocket is closed after the sample, untimed.
                   runc / podman: `runc exec -t CTR cat` / `podman exec -it CTR cat` with
                   stdin, stdout and stderr on the slave of a new pseudo-terminal
                   (pty.openpty(), raw mode, so that only the container's terminal echoes);
                   from spawning the command until the marker, written to the master right
                   after the spawn, has been read back twice from the master. Then ^D (cat
                   ends and the command with it), untimed; killed if it does not end.
  keystroke echo   on one open terminal per tool (opened as above, untimed): one byte (a
                   letter, a..z in turn) sent, until its echo is read back; the output must
                   be exactly that byte. Every 50 letters a newline is sent, untimed, and cat's
                   copy of the line is read and checked, so the line buffer never fills and
                   nothing is left unread.

Samples: --n-open per tool (default 100, after 3 untimed); --n-key for Sandboxer (default
500, after 20 untimed), at most 200 for runc and podman. After each tool's series, the
container's `ps` must show no cat left (logged otherwise).

Client side: websocket-client (python3-websocket) with TCP_NODELAY on its socket (set by
websocket-client by default; the script sets it again and checks), one frame per byte; the
pseudo-terminals are read with select() and os.read(). Prints a table of p50/p90/p99 in ms
(linear interpolation between the closest ranks). Everything it makes (the sandbox, the
daemon, the registry, podman containers and image, runc containers, the commands on
pseudo-terminals, temp dirs, mounts) is removed at the end, also on error or Ctrl-C; every
read has a time limit, every phase a budget, the run a total. Network traffic goes to
127.0.0.1 only. Run as root, through bench/run (make bench). Standard library, python3-httpx
and python3-websocket only.
"""
import fcntl
import json
import os
import pty
import select
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
import tty

import websocket

from bench_exec_create import PodmanIdle, Runc
from common import (Interrupted, Session, check_prerequisites, keep_log_cleanup,
                    log, machine_info, parser, percentile, print_header, registry, run,
                    timed_loop)

COLS, ROWS = 80, 24
LINE = 50  # letters per line in the keystroke series, then an untimed newline
LETTERS = b"abcdefghijklmnopqrstuvwxyz"
KEY_CLI_MAX = 200  # keystroke samples of runc and podman: at most this many
READ_TIMEOUT = 30  # seconds for one echo or marker to come back


# ---------------------------------------------------------------- terminals

class WsTerm:
    """A Sandboxer terminal WebSocket: input as binary frames, output gathered in buf."""

    def __init__(self, url, auth):
        self.ws = websocket.create_connection(url, timeout=READ_TIMEOUT,
                                              header=[f"Authorization: {auth}"])
        self.ws.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def nodelay(self):
        return bool(self.ws.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    def send(self, data):
        self.ws.send_binary(data)

    def read_until(self, done, timeout=READ_TIMEOUT):
        """Output into buf until done(buf); RuntimeError when the session ends or time is
        up first."""
        deadline = time.monotonic() + timeout
        while not done(self.buf):
            if time.monotonic() > deadline:
                raise RuntimeError(f"terminal: no answer in {timeout} s: {self.buf[-300:]!r}")
            try:
                op, data = self.ws.recv_data(control_frame=True)
            except websocket.WebSocketTimeoutException:
                continue
            if op == websocket.ABNF.OPCODE_BINARY:
                self.buf += data
            elif op == websocket.ABNF.OPCODE_CLOSE:
                code = struct.unpack("!H", data[:2])[0] if len(data) >= 2 else None
                raise RuntimeError(f"terminal: closed by the server ({code} "
                                   f"{data[2:].decode(errors='replace')}): {self.buf[-300:]!r}")
        return self.buf

    def take(self):
        out, self.buf = self.buf, b""
        return out

    def close(self):
        self.ws.close(timeout=5)


class PtyTerm:
    """argv with stdin, stdout and stderr on the slave of a new pseudo-terminal (raw mode,
    80x24), in a session of its own; the master is read into buf."""

    def __init__(self, argv):
        master, slave = pty.openpty()
        try:
            tty.setraw(slave)  # this side neither echoes nor edits: the container's terminal does
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
            self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave,
                                         start_new_session=True)
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        self.argv = argv
        self.fd = master
        self.buf = b""

    def send(self, data):
        os.write(self.fd, data)

    def read_until(self, done, timeout=READ_TIMEOUT):
        deadline = time.monotonic() + timeout
        while not done(self.buf):
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"{self.argv[0]}: no answer in {timeout} s: "
                                   f"{self.buf[-300:]!r}")
            if not select.select([self.fd], [], [], left)[0]:
                continue
            try:
                data = os.read(self.fd, 65536)
            except OSError:  # EIO: every slave descriptor is closed, the command ended
                data = b""
            if not data:
                raise RuntimeError(f"{' '.join(self.argv)} ended ({self.proc.poll()}): "
                                   f"{self.buf[-300:]!r}")
            self.buf += data
        return self.buf

    def take(self):
        out, self.buf = self.buf, b""
        return out

    def close(self, timeout=10):
        """^D at the start of a line: cat ends, and the command with it; killed (its whole
        session) if it does not end in time. Returns its exit status."""
        try:
            if self.proc.poll() is None:
                try:
                    self.send(b"\x04")
                except OSError:
                    pass
                deadline = time.monotonic() + timeout
                while self.proc.poll() is None and time.monotonic() < deadline:
                    # keep reading: a full terminal would block its last writes
                    if select.select([self.fd], [], [], 0.05)[0]:
                        try:
                            os.read(self.fd, 65536)
                        except OSError:
                            pass
            if self.proc.poll() is None:
                log(f"{' '.join(self.argv)} did not end after ^D; killing it")
                self.kill()
            return self.proc.returncode
        finally:
            os.close(self.fd)
            self.fd = -1

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)


class PtyTerms:
    """The PtyTerms of the run, killed at cleanup if still open."""

    def __init__(self):
        self.open = set()

    def start(self, argv):
        t = PtyTerm(argv)
        self.open.add(t)
        return t

    def close(self, t):
        self.open.discard(t)
        rc = t.close()
        if rc != 0:
            raise RuntimeError(f"{' '.join(t.argv)} exited with {rc} after ^D: "
                               f"{t.buf[-300:]!r}")

    def cleanup(self):
        for t in list(self.open):
            t.kill()
            if t.fd >= 0:
                os.close(t.fd)
        self.open.clear()


# ---------------------------------------------------------------- the two measurements

def open_op(opener, closer):
    """A sample of terminal open: opener() starts the terminal (clock running), the marker
    goes in and must come back twice; closer(term) afterwards, untimed."""
    seq = [0]

    def op():
        seq[0] += 1
        marker = f"ready-{seq[0]}".encode()
        back = marker + b"\r\n"
        t0 = time.perf_counter_ns()
        term = opener()
        try:
            term.send(marker + b"\n")
            term.read_until(lambda b: b.count(back) >= 2)
            dt = (time.perf_counter_ns() - t0) / 1e6
            if term.buf != back * 2:
                raise RuntimeError(f"terminal open: expected {back * 2!r}, read {term.buf!r}")
        finally:
            closer(term)
        return dt
    return op


def ready(term):
    """An opened terminal whose cat is known to run (untimed)."""
    term.send(b"up\n")
    term.read_until(lambda b: b.count(b"up\r\n") >= 2)
    if term.take() != b"up\r\n" * 2:
        raise RuntimeError("terminal: unexpected output before the keystrokes")
    return term


class Keys:
    """Keystroke echo samples on one terminal."""

    def __init__(self, term):
        self.term = term
        self.i = 0
        self.line = b""

    def op(self):
        c = LETTERS[self.i % len(LETTERS):][:1]
        self.i += 1
        t0 = time.perf_counter_ns()
        self.term.send(c)
        self.term.read_until(len)
        dt = (time.perf_counter_ns() - t0) / 1e6
        got = self.term.take()
        if got != c:
            raise RuntimeError(f"keystroke {c!r}: read {got!r}")
        self.line += c
        if len(self.line) >= LINE:
            self.flush()
        return dt

    def flush(self):
        """Newline (untimed): its echo and cat's copy of the line come back."""
        if not self.line:
            return
        want = b"\r\n" + self.line + b"\r\n"
        self.term.send(b"\n")
        self.term.read_until(lambda b: len(b) >= len(want))
        got = self.term.take()
        if got != want:
            raise RuntimeError(f"keystrokes: expected {want!r} after the newline, read {got!r}")
        self.line = b""


def key_series(name, term, n, budget):
    keys = Keys(ready(term))
    samples = timed_loop(name, n, 20, budget, keys.op)
    keys.flush()
    return samples


def check_cats(tool, ps):
    """How many cat processes still run in the container, from ps() (the output of busybox
    `ps` there), after a short wait for the last session's to go; logged when not 0."""
    n = 0
    for _ in range(20):
        n = sum(1 for line in ps().splitlines()[1:] if line.split()[3:] == ["cat"])
        if n == 0:
            break
        time.sleep(0.1)
    if n:
        log(f"{tool}: {n} cat process(es) still running after their terminals were closed")
    return n


# ---------------------------------------------------------------- main

def summarize(rows):
    lines = [f"{'benchmark':<15} {'tool':<16} {'n':>4} {'p50 ms':>8} {'p90 ms':>8} "
             f"{'p99 ms':>8}"]
    for r in rows:
        s = sorted(r["samples"])
        r["p50"], r["p90"], r["p99"] = (percentile(s, p) for p in (50, 90, 99))
        lines.append(f"{r['bench']:<15} {r['tool']:<16} {len(s):>4} {r['p50']:>8.3f} "
                     f"{r['p90']:>8.3f} {r['p99']:>8.3f}")
    return "\n".join(lines)


def main():
    args = parser("terminal", __doc__).parse_args()
    check_prerequisites(args)
    info = machine_info(args.bin)
    session = Session(args.total_timeout)
    prefix, workdir = session.prefix, session.workdir
    reg = sbx = rc = pm = failed = None
    session.on_cleanup("the daemon's log", keep_log_cleanup(lambda: sbx, args.keep_log))
    results = {}  # (bench, tool) -> samples
    notes = {}
    n_key_cli = min(args.n_key, KEY_CLI_MAX)
    try:
        build = registry._build_module()
        layout = build.ensure("busybox")
        log(f"busybox layout: {layout}")
        reg, sbx = session.start_sandboxer(args, "term", names=("hello-world", "busybox"))
        rc = Runc(layout, os.path.join(workdir, "runc"), prefix)
        session.on_cleanup("runc", rc.cleanup)
        if not args.no_podman:
            pm = PodmanIdle(layout, prefix)
            session.on_cleanup("podman", pm.cleanup)
            pm.load()
        terms = PtyTerms()
        session.on_cleanup("commands on pseudo-terminals", terms.cleanup)

        # ---- Sandboxer: one sandbox (the image pulled by its create, untimed)
        log("sandboxer: creating the sandbox (pulls busybox, untimed)")
        sid = sbx.create()
        auth = sbx.http.headers["Authorization"]
        url = (str(sbx.http.base_url).rstrip("/").replace("http://", "ws://", 1)
               + f"/sandboxes/{sid}/exec/pty?cmd=cat&cols={COLS}&rows={ROWS}")
        probe = WsTerm(url, auth)
        notes["ws_tcp_nodelay"] = probe.nodelay()
        probe.close()
        if not notes["ws_tcp_nodelay"]:
            raise RuntimeError("TCP_NODELAY did not stick on the WebSocket's socket")
        log(f"terminal open: sandboxer x{args.n_open}")
        results[("terminal open", "sandboxer")] = timed_loop(
            "sandboxer open", args.n_open, 3, args.phase_timeout,
            open_op(lambda: WsTerm(url, auth), lambda t: t.close()))
        log(f"keystroke echo: sandboxer x{args.n_key}")
        term = WsTerm(url, auth)
        try:
            results[("keystroke echo", "sandboxer")] = key_series(
                "sandboxer keys", term, args.n_key, args.phase_timeout)
        finally:
            term.close()
        notes["cats_left_sandboxer"] = check_cats("sandboxer", lambda: sbx.request(
            "POST", f"/sandboxes/{sid}/exec", json={"argv": ["ps"]}).json()["stdout"])
        sbx.delete(sid)

        def cli_rows(tool, argv, ps_argv):
            """Open and keystroke series for a CLI's terminal on one idling container."""
            log(f"terminal open: {tool} x{args.n_open}")
            results[("terminal open", tool)] = timed_loop(
                f"{tool} open", args.n_open, 3, args.phase_timeout,
                open_op(lambda: terms.start(argv), terms.close))
            log(f"keystroke echo: {tool} x{n_key_cli}")
            term = terms.start(argv)
            try:
                results[("keystroke echo", tool)] = key_series(
                    f"{tool} keys", term, n_key_cli, args.phase_timeout)
            finally:
                terms.close(term)
            name = tool.split()[0]
            notes[f"cats_left_{name}"] = check_cats(name, lambda: run(
                ps_argv, text=True).stdout)

        # ---- bare runc: one container idling in sleep
        cid, bundle = rc.prepare()
        rc.start(cid, bundle)
        cli_rows("runc exec -t", ["runc", "--root", rc.root, "exec", "-t", cid, "cat"],
                 ["runc", "--root", rc.root, "exec", cid, "ps"])
        rc.delete(cid)

        # ---- podman: one container idling in sleep
        if pm:
            name = pm.start()
            cli_rows("podman exec -it", ["podman", "exec", "-it", name, "cat"],
                     ["podman", "exec", name, "ps"])
            pm.delete(name)
    except (Exception, KeyboardInterrupt, Interrupted) as e:
        failed = session.stopped(e, sbx)
    finally:
        session.close()

    rows = [{"bench": bench, "tool": tool, "samples": results[(bench, tool)]}
            for bench in ("terminal open", "keystroke echo")
            for tool in ("sandboxer", "runc exec -t", "podman exec -it")
            if (bench, tool) in results]
    print_header(info, session.t_start)
    print(summarize(rows))
    print()
    print("command: cat on an 80x24 terminal, busybox, one running container per tool")
    print("terminal open:  from the WebSocket handshake (sandboxer) or the spawn (runc, "
          "podman) until a marker line came back twice: the echo and cat's copy")
    print("keystroke echo: one letter in, until its echo is read back, on one open terminal")
    print("sandboxer: GET /sandboxes/{id}/exec/pty?cmd=cat over 127.0.0.1, websocket-client "
          f"{websocket.__version__} with TCP_NODELAY on its socket "
          f"({'checked' if notes.get('ws_tcp_nodelay') else 'not checked'})")
    print("runc exec -t / podman exec -it: stdin, stdout and stderr on a pty.openpty() slave "
          "in raw mode, read from the master with select()")
    left = {k[len("cats_left_"):]: v for k, v in notes.items() if k.startswith("cats_left_")}
    if any(left.values()):
        print("cat processes left running after their terminals closed: " + ", ".join(
            f"{k} {v}" for k, v in left.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "notes": notes, "rows": [
                {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()
                 if k != "samples"} | {"n": len(r["samples"]),
                                       "samples_ms": [round(x, 4) for x in r["samples"]]}
                for r in rows]}, f, indent=2)
    if failed is not None:
        sys.exit(1)


if __name__ == "__main__":
    main()
