"""The parts of ``scripts/bench_router.py``, from the wire up: peers, the processes under
test, timed runs, the report. The script itself reads its flags and runs them."""
