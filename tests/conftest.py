"""Shared test settings.

Hypothesis deadlines are off: CI machines are slow and noisy, and speed is proven by
the benchmarks under scripts/, never by timing tests.

A compiled hot module runs in place of its source (see ``hatch_build.py``): if one is
older than its source, the tests would test old code, so the session stops at once and
says how to rebuild.
"""

import os
from collections.abc import Iterator
from pathlib import Path

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


@pytest.fixture(autouse=True, scope="session")
def runs_kept_in_a_temporary_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every kept run (testnet, load, replay) a test makes without --out goes to a
    temporary folder, not into .gnutella-router/runs of wherever the tests run; child
    processes inherit it."""
    from gnutella_router.run_folder import RUNS_ENVIRONMENT

    folder = tmp_path_factory.mktemp("runs")
    before = os.environ.get(RUNS_ENVIRONMENT)
    os.environ[RUNS_ENVIRONMENT] = str(folder)
    yield folder
    if before is None:
        os.environ.pop(RUNS_ENVIRONMENT, None)
    else:
        os.environ[RUNS_ENVIRONMENT] = before
