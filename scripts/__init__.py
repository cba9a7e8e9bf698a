"""The benchmarks, experiments, fuzzer, soak and live checks, and the parts they share.

Each ``scripts/NAME.py`` is a command, run as the docs say
(``.venv/bin/python scripts/NAME.py``) or as ``.venv/bin/python -m scripts.NAME``; the
folders beside them (``router_bench/``, ``fig14/``, ``router_admission/`` ...) and the
modules ``runner.py`` (every process the scripts start), ``benchdocs.py`` (the docs'
sections) and ``yardstick.py`` (the two yardstick routers' common part) are what they
share, imported as ``scripts.router_bench.peers`` and so on, never by a path put on
``sys.path``.

This package is importable because the project's editable install (``scripts/venv.sh``,
``pip install -e .``) puts the repository root on the path
(``tool.hatch.build.targets.wheel.dev-mode-dirs`` in pyproject.toml). It is not in the
wheel: the scripts measure a checkout (they write its docs/, read its git history and
build its other versions), so an installed router has no use for them.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The checkout the scripts measure and write the docs of."""
