"""The parts of ``scripts/fuzz_router.py``: its settings and figures, the frame and
handshake generators, the sockets, the good peers, the router process, the run and the
report. The script itself reads its flags, starts the router and runs them."""
