"""Shared test settings.

Hypothesis deadlines are off: CI machines are slow and noisy, and speed is proven by
the benchmarks under scripts/, never by timing tests.

A compiled hot module runs in place of its source (see ``hatch_build.py``): if one is
older than its source, the tests would test old code, so the session stops at once and
says how to rebuild. The session's header says which spelling of the hot path runs
(compiled, or interpreted: ``GNUTELLA_ROUTER_INTERPRETED``, see
:mod:`gnutella_router.native`).
"""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import Phase, settings

from gnutella_router.native import describe, stale_modules

settings.register_profile("default", deadline=None, print_blob=True)
settings.load_profile("default")
settings.register_profile(
    "no-shrinking",
    parent=settings.get_profile("default"),
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
"""For a run that must fail fast rather than find the smallest failing case: the second
spelling's run of the hot modules' tests (``tests/gnutella_router/test_native.py``)."""

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


def pytest_report_header() -> str:
    return describe()
