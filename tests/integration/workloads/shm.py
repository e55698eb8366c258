"""A counter in a mapped file in /dev/shm (shared memory, a tmpfs), and a file that is
deleted while open: both must come back with their contents."""
import mmap
import os
import struct
import time
from state import State

fd = os.open("/dev/shm/wl-seg", os.O_RDWR | os.O_CREAT, 0o600)
os.ftruncate(fd, 4096)
seg = mmap.mmap(fd, 4096)
gone = open("/tmp/wl/gone", "w+b")
os.unlink("/tmp/wl/gone")
st = State("shm")
while True:
    n = struct.unpack_from("Q", seg, 0)[0] + 1
    struct.pack_into("Q", seg, 0, n)
    gone.write(b"x")
    gone.flush()
    gone.seek(0)
    size = len(gone.read())
    st.tick(shm=n, gone_size=size)
    time.sleep(0.02)
