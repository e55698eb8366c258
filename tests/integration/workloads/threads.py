"""Four threads count; the main thread publishes their sum."""
import os
import threading
import time
from state import State

counts = [0] * 4


def work(i):
    while True:
        counts[i] += 1
        time.sleep(0.01)


for i in range(4):
    threading.Thread(target=work, args=(i,), daemon=True).start()
st = State(os.environ.get("STATE_NAME", "threads"))
while True:
    time.sleep(0.05)
    st.count = 0
    st.tick(sum(counts), alive=sum(1 for t in threading.enumerate() if t.is_alive()))
