"""The parts of ``scripts/soak.py``: the router processes, what is read of them, the
load and the samples, the soak itself, its figures and checks, the report and the plot.
The script itself reads its flags, runs a soak and publishes what it found."""
