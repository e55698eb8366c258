"""Keeps an sqlite database in WAL mode open and inserts a row every 20 ms."""
import sqlite3
import time
from state import State

db = sqlite3.connect("/tmp/wl/wal.db", isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT)")
st = State("sqlite_wal")
while True:
    db.execute("INSERT INTO t (v) VALUES (?)", (st.boot,))
    st.tick(rows=db.execute("SELECT count(*) FROM t").fetchone()[0])
    time.sleep(0.02)
