"""The README's example commands are commands this version accepts, as written."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from gnutella_router.cli.main import build_parser

README = Path(__file__).resolve().parents[1] / "README.md"


def _commands() -> list[str]:
    return [
        line.split("#", 1)[0].strip().rstrip("&").strip()
        for line in README.read_text().splitlines()
        if line.startswith(".venv/bin/gnutella-router ")
    ]


def test_the_readme_has_examples() -> None:
    assert len(_commands()) >= 10


@pytest.mark.parametrize("command", _commands())
def test_every_readme_command_parses(command: str) -> None:
    argv = shlex.split(command)[1:]
    build_parser().parse_args(argv)  # exits 2 on anything it does not accept
