"""Shared test settings.

Hypothesis deadlines are off: CI machines are slow and noisy, and speed is proven by
the benchmarks under scripts/, never by timing tests.

A compiled hot module runs in place of its source (see ``hatch_build.py``): if one is
older than its source, the tests would test old code, so the session stops at once and
says how to rebuild.
"""

import pytest
from hypothesis import settings

from gnutella_router.native import stale_modules

settings.register_profile("default", deadline=None, print_blob=True)
settings.load_profile("default")

if stale := stale_modules():
    pytest.exit(
        f"compiled modules older than their sources: {', '.join(stale)}; rebuild them with "
        "scripts/venv.sh dev (or test the sources: GNUTELLA_ROUTER_PURE=1 scripts/venv.sh dev)",
        returncode=2,
    )
