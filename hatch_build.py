"""Build hook: the routing hot path compiled with mypyc where a C compiler is at hand.

Theory of operation
-------------------
The modules a routed message spends most of its time in (:data:`HOT_MODULES`, listed in
:mod:`gnutella_router.native`: framing, the batch path and the route tables) are plain,
fully typed Python. When a wheel is built
(``pip install .``, or ``pip install -e .`` as ``scripts/venv.sh`` does), this hook hands
them to mypyc, which turns each into a C extension beside its source; Python then
imports the extension in place of the ``.py`` file. ``docs/benchmarks.md`` has what
that is worth, measured side by side with the same tree uncompiled.

Compiling is an option, never a requirement: with no C compiler, no Python headers, or
``GNUTELLA_ROUTER_PURE=1`` in the environment, the hook says why in one line (and
records it, for ``gnutella-router --version``) and the package installs as pure Python,
which behaves the same, only slower. Nothing else in the code knows or cares which it
got; :mod:`gnutella_router.native` reports it, and holds the list of hot modules.

A compiled module shadows its source, so an edited source would silently not run. The
hook therefore records a hash of each source it compiled in
``gnutella_router/native_build.json``; :mod:`gnutella_router.native` compares them at run
time, the daemon warns and the test suite stops when one is stale, and
``scripts/venv.sh`` rebuilds when a hot module changes.

The compiler runs in a child process (``python -c`` on :func:`mypyc.build.mypycify` and
setuptools' ``build_ext --inplace``), so a failing compile cannot leave the build
process in an odd state, and its output is shown only when it fails.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


def _load_native() -> Any:
    """:mod:`gnutella_router.native`, loaded by path: the hook must not import the
    package it builds (nor its dependencies, which the build may not have)."""
    path = Path(__file__).resolve().parent / "gnutella_router" / "native.py"
    spec = importlib.util.spec_from_file_location("_gnutella_router_native", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


_native = _load_native()

HOT_MODULES: tuple[str, ...] = _native.HOT_SOURCES
"""Compiled when possible, as paths from the project root (``native.HOT_SOURCES``)."""

source_hash = _native.source_hash

PACKAGES = ("protocol", "gnutella_router", "traffic_models")
"""The project's packages (``tool.hatch.build.targets.wheel.packages``)."""

RECORD = f"gnutella_router/{_native.RECORD_NAME}"
"""What was compiled, with each source's hash, or why nothing was (read by
:mod:`gnutella_router.native`)."""

_COMPILE = """
import sys
from mypyc.build import mypycify
from setuptools import setup
setup(
    name="gnutella-router-native",
    packages=[],
    py_modules=[],
    ext_modules=mypycify(sys.argv[1:], opt_level="3"),
    script_args=["build_ext", "--inplace", "--build-temp", "build/native"],
)
"""


class NativeBuildError(Exception):
    """The hot modules could not be compiled; the message says why."""


def extension_path(root: Path, module: str) -> Path:
    """Where the compiled form of ``module`` (a path from the root) lies."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return root / (module.removesuffix(".py") + suffix)


def compiled_files(root: Path) -> list[Path]:
    """The extension files a compile left in ``root`` (the hot modules' and mypyc's
    shared runtime library)."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    files = [extension_path(root, module) for module in HOT_MODULES]
    files += sorted(root.glob(f"*__mypyc{suffix}"))
    return [path for path in files if path.exists()]


def remove_compiled(root: Path, reason: str | None = None) -> None:
    """Remove every compiled hot module, so the sources are what runs; with a
    ``reason``, record why (``gnutella-router --version`` shows it)."""
    for path in compiled_files(root):
        path.unlink()
    (root / RECORD).unlink(missing_ok=True)
    if reason is not None:
        (root / RECORD).write_text(json.dumps({"modules": {}, "not_compiled": reason}) + "\n")


def copy_of_the_sources(root: Path, into: Path) -> Path:
    """The packages under ``root`` copied to ``into`` without anything compiled, with
    what the compile reads beside them (for compiling or running a copy on its own)."""
    for package in PACKAGES:
        shutil.copytree(
            root / package,
            into / package,
            ignore=shutil.ignore_patterns("__pycache__", "*.so", Path(RECORD).name),
        )
    for name in ("pyproject.toml", "LICENSE", "README.md"):
        shutil.copy(root / name, into / name)
    return into


def compile_hot_path(root: Path, environment: dict[str, str] | None = None) -> list[Path]:
    """Compile :data:`HOT_MODULES` in place under ``root`` and write :data:`RECORD`.

    Returns the files made. Raises :class:`NativeBuildError` (with the compiler's last
    lines) when it cannot; then nothing compiled is left behind, so the sources run.
    """
    remove_compiled(root)
    env = dict(os.environ if environment is None else environment)
    try:
        result = subprocess.run(
            [sys.executable, "-c", _COMPILE, *HOT_MODULES],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        reason = f"the compiler could not run: {exc}"
        remove_compiled(root, reason)
        raise NativeBuildError(reason) from exc
    made = compiled_files(root)
    missing = [module for module in HOT_MODULES if not extension_path(root, module).exists()]
    if result.returncode != 0 or missing:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        reason = " / ".join(tail) or f"exit status {result.returncode}"
        remove_compiled(root, reason)
        raise NativeBuildError(reason)
    record = {module: source_hash(root / module) for module in HOT_MODULES}
    (root / RECORD).write_text(json.dumps({"modules": record}, indent=1) + "\n")
    return [*made, root / RECORD]


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    """Compiles the hot path into the wheel (or in place, for an editable install)."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        if os.environ.get("GNUTELLA_ROUTER_PURE", "") not in ("", "0"):
            remove_compiled(root, "GNUTELLA_ROUTER_PURE was set")
            self.app.display_info("gnutella-router: GNUTELLA_ROUTER_PURE is set; pure Python")
            made = [root / RECORD]
        else:
            try:
                made = compile_hot_path(root)
            except NativeBuildError as exc:
                self.app.display_warning(
                    f"gnutella-router: the hot path was not compiled ({exc}); "
                    "installing it as pure Python, which works the same, only slower"
                )
                made = [root / RECORD]
            else:
                self.app.display_info(f"gnutella-router: compiled {len(HOT_MODULES)} modules")
                if version == "standard":
                    build_data["pure_python"] = False
                    build_data["infer_tag"] = True
        if version == "standard":  # the record (and what was compiled) into the wheel
            for path in made:
                build_data["force_include"][str(path)] = str(path.relative_to(root))
