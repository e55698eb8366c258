"""Two processes of the sandbox talking over TCP on 127.0.0.1: the server counts the
round trips of one long-lived connection."""
import os
import socket
import time
from state import State

srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 9100))
srv.listen()
if os.fork() == 0:
    c = socket.create_connection(("127.0.0.1", 9100))
    i = 0
    while True:
        i += 1
        c.sendall(b"%d\n" % i)
        assert c.recv(16) == b"ok\n"
        time.sleep(0.02)
conn, _ = srv.accept()
st = State("tcp_loopback")
for line in conn.makefile("rb"):
    conn.sendall(b"ok\n")
    st.tick(last=int(line))
