"""A unix socket server and a client process talking over a connected pair, and a
socketpair inside the server process: the state counts completed round trips."""
import os
import socket
import time
from state import State

path = "/tmp/wl/u.sock"
if os.path.exists(path):
    os.unlink(path)
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(path)
srv.listen()
a, b = socket.socketpair()
if os.fork() == 0:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(path)
    while True:
        c.sendall(b"ping\n")
        assert c.recv(16) == b"pong\n"
        time.sleep(0.02)
conn, _ = srv.accept()
st = State("unixsock")
while True:
    assert conn.recv(16) == b"ping\n"
    a.sendall(b"x")
    assert b.recv(1) == b"x"
    conn.sendall(b"pong\n")
    st.tick()
