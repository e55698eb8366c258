"""Shared by the workload scripts: each keeps a counter and a random boot id in memory and
writes both to /tmp/<name>.state, so a test can tell a process that went on (same boot id,
a larger counter) from one that was started again (a new boot id) or stopped."""
import json
import os


class State:
    def __init__(self, name):
        self.path = f"/tmp/{name}.state"
        self.boot = os.urandom(8).hex()
        self.count = 0
        self.extra = {}

    def tick(self, n=1, **extra):
        self.count += n
        self.extra.update(extra)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"boot": self.boot, "count": self.count, "pid": os.getpid(), **self.extra}, f)
        os.replace(tmp, self.path)
