"""Daemonizes itself the classic way (fork, setsid, fork, close fds), then counts."""
import os
import sys
import time

if os.fork():
    sys.exit(0)
os.setsid()
if os.fork():
    os._exit(0)
os.chdir("/")
devnull = os.open("/dev/null", os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(devnull, fd)
sys.path.insert(0, "/tmp/wl")
from state import State  # noqa: E402
st = State("daemon")
while True:
    st.tick()
    time.sleep(0.05)
