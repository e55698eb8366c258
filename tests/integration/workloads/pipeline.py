"""The reading end of `producer | python3 pipeline.py`: counts the lines it gets."""
import sys
from state import State

st = State("pipeline")
for line in sys.stdin:
    st.tick(last=int(line))
