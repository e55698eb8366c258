# A Python REPL reading a FIFO: a holder keeps the FIFO's write end open, so the REPL waits
# for input instead of ending; `echo CODE > /tmp/wl/repl.in` runs CODE in it.
rm -f /tmp/wl/repl.in && mkfifo /tmp/wl/repl.in
nohup sleep 100000 > /tmp/wl/repl.in 2>/dev/null &
nohup python3 -i -u -q < /tmp/wl/repl.in > /tmp/wl/repl.out 2>&1 &
