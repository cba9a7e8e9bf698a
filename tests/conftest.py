"""Shared test settings.

Hypothesis deadlines are off: CI machines are slow and noisy, and speed is proven by
the benchmarks under scripts/, never by timing tests.
"""

from hypothesis import settings

settings.register_profile("default", deadline=None, print_blob=True)
settings.load_profile("default")
