#!/usr/bin/env python3
"""Fork and coalesce: try several attempts in parallel branches, keep the best one.

An agent has a workspace in a sandbox: a task (count the primes below n), its tests, and a
first, slow solution. Rather than trying fixes one after the other and undoing the failed
ones, it forks the sandbox into one branch per attempt. Each fork starts with the parent's
files, processes and memory, so nothing is set up twice. Every branch applies its attempt
and runs the tests (the branches run concurrently, through the SDK's ``a``-prefixed
coroutines). The agent scores them (tests passed, then speed), picks the best, and
coalesces the tree onto it: the winner becomes the new root, and the other branches and the
original sandbox are deleted. The kept sandbox has the winning solution in place.

The attempts here are fixed strings standing in for what a model would propose; replace
``ATTEMPTS`` (or generate it) to use this loop for real.

Run it against a daemon (``make run`` prints the admin token on first start)::

    export SANDBOXER_URL=http://127.0.0.1:8000 SANDBOXER_TOKEN=sbx_...
    python3 examples/fork_and_coalesce.py

Environment: ``SANDBOXER_URL``, ``SANDBOXER_TOKEN`` (or the unix socket and the CLI's saved
token); ``SANDBOXER_IMAGE``: an image with python3 (default ``python``); ``BRANCHES``: how many
of the attempts to try (default all). ``--keep`` keeps the winning sandbox (its id is
printed) instead of deleting it at the end.
"""
import asyncio
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

TASK = """Implement count_primes(n): how many primes are < n. Must handle n up to 10**6
within a second.
"""

TESTS = r'''
import json, signal, sys, time
sys.path.insert(0, "/work")
CASES = [(0, 0), (2, 0), (3, 1), (13, 5), (100, 25), (1000, 168), (10**6, 78498)]

def alarm(*_):
    raise TimeoutError("over 1 s")

signal.signal(signal.SIGALRM, alarm)
passed, failures, t0 = 0, [], time.perf_counter()
try:
    from solution import count_primes
except Exception as e:
    failures.append(f"import: {type(e).__name__}: {e}")
else:
    for n, want in CASES:
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        try:
            got = count_primes(n)
            if got == want:
                passed += 1
            else:
                failures.append(f"count_primes({n}) = {got}, want {want}")
        except Exception as e:
            failures.append(f"count_primes({n}): {type(e).__name__}: {e}")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
print(json.dumps({"passed": passed, "total": len(CASES), "failures": failures,
                  "seconds": round(time.perf_counter() - t0, 3)}))
'''

FIRST_SOLUTION = '''
def count_primes(n):
    return sum(1 for k in range(2, n) if all(k % d for d in range(2, k)))
'''

# What the agent will try, one branch each.
ATTEMPTS = {
    "trial-division": '''
def count_primes(n):
    count = 0
    for k in range(2, n):
        d = 2
        while d * d <= k:
            if k % d == 0:
                break
            d += 1
        else:
            count += 1
    return count
''',
    "sieve-off-by-one": '''
def count_primes(n):
    if n < 2:
        return 0
    sieve = bytearray([1]) * (n + 1)
    sieve[0:2] = b"\\0\\0"
    for i in range(2, int(n ** 0.5) + 1):
        if sieve[i]:
            sieve[i * i::i] = bytearray(len(range(i * i, n + 1, i)))
    return sum(sieve)
''',
    "numpy-sieve": '''
import numpy as np

def count_primes(n):
    s = np.ones(max(n, 2), dtype=bool)
    s[:2] = False
    for i in range(2, int(n ** 0.5) + 1):
        if s[i]:
            s[i * i::i] = False
    return int(s[:n].sum())
''',
    "sieve": '''
def count_primes(n):
    if n < 3:
        return 0
    sieve = bytearray([1]) * n
    sieve[0:2] = b"\\0\\0"
    for i in range(2, int(n ** 0.5) + 1):
        if sieve[i]:
            sieve[i * i::i] = bytearray(len(range(i * i, n, i)))
    return sum(sieve)
''',
}


def run_tests(sb):
    r = sb.exec(["python3", "/work/test_primes.py"], timeout=60)
    return json.loads(r.stdout) if r.ok else {"passed": 0, "total": 0, "seconds": 0,
                                              "failures": [r.stderr.strip()[-300:]]}


async def try_attempt(branch, name, code):
    """Apply one attempt in its branch and run the tests there (a coroutine)."""
    await branch.awrite_file("/work/solution.py", code)
    r = await branch.aexec(["python3", "/work/test_primes.py"], timeout=60)
    report = json.loads(r.stdout) if r.ok else {"passed": 0, "failures": [r.stderr[-300:]],
                                                "seconds": 0}
    return name, branch, report


async def explore(root, attempts):
    # forks one after the other (each is a checkpoint of the running parent) ...
    branches = {name: root.fork(label=name) for name in attempts}
    for name, b in branches.items():
        print(f"forked {name}: {b.id[:12]} (memory preserved: {b.memory_preserved})")
    # ... then every branch works at the same time
    return await asyncio.gather(*(try_attempt(branches[n], n, c) for n, c in attempts.items()))


def main():
    keep = "--keep" in sys.argv[1:]
    n = int(os.environ.get("BRANCHES", len(ATTEMPTS)))
    attempts = dict(list(ATTEMPTS.items())[:n])
    client = sandboxer.Sandboxer()
    root = client.create(IMAGE, label="agent-workspace", args=["sleep", "infinity"])
    print(f"workspace: {root.id[:12]} ({IMAGE})")
    kept = None
    try:
        root.upload("/work", {"TASK.md": TASK, "test_primes.py": TESTS,
                              "solution.py": FIRST_SOLUTION})
        base = run_tests(root)
        print(f"baseline: {base['passed']}/{base['total']} passed")

        t0 = time.monotonic()
        results = asyncio.run(explore(root, attempts))
        print(f"explored {len(results)} branches in {time.monotonic() - t0:.1f} s")
        for name, b, rep in results:
            why = f" ({rep['failures'][0]})" if rep.get("failures") else ""
            print(f"branch {name}: {rep['passed']}/{rep.get('total', '?')} passed "
                  f"in {rep['seconds']} s{why}")

        name, best, rep = max(results, key=lambda x: (x[2]["passed"], -x[2]["seconds"]))
        print(f"winner: {name} ({best.id[:12]})")
        print(root.tree().text, end="")

        kept = root.coalesce(best)
        print(f"coalesced onto {kept.id[:12]}: {len(kept.terminated_sandboxes)} sandboxes "
              f"deleted")
        print(kept.tree().text, end="")
        final = run_tests(kept)
        print(f"final check in the kept sandbox: {final['passed']}/{final['total']} passed")
        in_place = kept.read_text("/work/solution.py") == attempts[name]
        print(f"/work/solution.py is the {name!r} attempt: {in_place}")
    finally:
        if kept is None:  # something failed before coalescing: remove the whole tree
            for node in reversed(client.get(root.id).tree().root.ids()):
                client.delete(node)
        elif keep:
            print(f"kept: {kept.id} (delete it with client.delete or `sandboxer rm`)")
        else:
            kept.terminate()
            print("deleted the kept sandbox (pass --keep to keep it)")
    client.close()


if __name__ == "__main__":
    main()
