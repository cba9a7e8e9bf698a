"""The commands in the README and docs/ run as written: each ``gnutella-router`` command
line is one this version accepts, each script named exists and is run with the
project's Python (the machine's own lacks the project's packages), and the README's
``decode`` sample is what the command prints."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from gnutella_router.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+)`")
PLACEHOLDER = re.compile(r"\[|\]|\.\.\.|\b[A-Z][A-Z_:]{2,}\b|\|")
"""Usage lines (``replay TRACE --target HOST:PORT [--speed X]``) name things, not values."""


def _fenced_lines(text: str) -> list[str]:
    """Lines of fenced code blocks, with backslash continuations joined."""
    lines: list[str] = []
    for block in FENCE.findall(text):
        pending = ""
        for raw in block.splitlines():
            line = pending + raw.strip()
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            pending = ""
            lines.append(line)
    return lines


def _command_of(line: str) -> list[str] | None:
    """The ``gnutella-router`` arguments of a shell line, or None if it runs something
    else (``sudo`` and ``VAR=value`` in front are passed over; a comment is cut off)."""
    line = line.removeprefix("$ ").split(" #", 1)[0].strip().rstrip("&").strip()
    try:
        words = shlex.split(line)
    except ValueError:
        return None
    while words and (words[0] == "sudo" or re.match(r"^[A-Z_]+=", words[0])):
        words = words[1:]
    if not words or words[0] not in (".venv/bin/gnutella-router", "gnutella-router"):
        return None
    return words[1:]


def _commands() -> list[tuple[str, list[str]]]:
    found = []
    for path in DOCS:
        text = path.read_text()
        # Inline, a bare `gnutella-router replay` names a command in prose; with its
        # arguments it is one to run.
        candidates = _fenced_lines(text) + [
            span
            for span in SPAN.findall(text)
            if not PLACEHOLDER.search(span) and len(span.split()) > 2
        ]
        for line in candidates:
            argv = _command_of(line)
            if argv:
                found.append((f"{path.relative_to(ROOT)}: {line}", argv))
    return found


COMMANDS = _commands()


def test_the_docs_have_examples() -> None:
    assert len(COMMANDS) >= 30
    places = {where.split(":")[0] for where, _ in COMMANDS}
    assert {"README.md", "docs/trace-format.md", "docs/servents.md"} <= places


@pytest.mark.parametrize(("where", "argv"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_every_documented_command_parses(where: str, argv: list[str]) -> None:
    if "--version" in argv or "--help" in argv:
        with pytest.raises(SystemExit) as ended:  # they end here, and well
            build_parser().parse_args(argv)
        assert ended.value.code == 0, where
        return
    build_parser().parse_args(argv)  # exits 2 on anything it does not accept


def _script_runs() -> list[tuple[str, str]]:
    """``(where, the command)`` for every mention of running a script under scripts/."""
    runs: list[tuple[str, str]] = []
    for path in DOCS:
        for line in path.read_text().splitlines():
            where = f"{path.relative_to(ROOT)}: {line.strip()[:80]}"
            runs.extend(
                (where, match.group(0))
                for match in re.finditer(r"([\w./-]*python3?)\s+(scripts/[\w/.-]+\.py)", line)
            )
    return runs


SCRIPT_RUNS = _script_runs()


def test_scripts_are_run_with_the_projects_python_and_exist() -> None:
    assert len(SCRIPT_RUNS) >= 20
    wrong = [where for where, run in SCRIPT_RUNS if not run.startswith(".venv/bin/python ")]
    assert not wrong, "\n".join(wrong)
    missing = [run for _, run in SCRIPT_RUNS if not (ROOT / run.split()[-1]).is_file()]
    assert not missing, missing


def test_a_replay_aims_at_a_gnutella_port_not_an_admin_port() -> None:
    """A router listens on 6346 by default and serves its admin interface on 6347: a
    replay into 6347 talks HTTP to a Gnutella handshake."""
    for where, argv in COMMANDS:
        if argv[:1] == ["replay"] and "--target" in argv:
            assert not argv[argv.index("--target") + 1].endswith(":6347"), where


def test_the_readmes_decode_sample_is_what_decode_prints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = (ROOT / "README.md").read_text()
    block = next(b for b in FENCE.findall(text) if "gnutella-router decode --count" in b)
    command, *shown = block.rstrip("\n").splitlines()
    argv = _command_of(command)
    assert argv is not None
    assert main(argv) == 0
    assert capsys.readouterr().out.rstrip("\n").splitlines() == shown


def test_every_benchmark_section_says_when_and_from_what_tree() -> None:
    """Each section of docs/benchmarks.md dates its figures and names a commit: the
    run's own, or (for figures from before runs recorded it) the commit that wrote them
    into the file."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    assert len(sections) >= 10
    for section in sections:
        title, _, body = section.partition("\n")
        opening = next(
            (line for line in body.splitlines() if re.match(r"^(Measured|Counted) ", line)), ""
        )
        assert re.search(r"\b20\d\d-\d\d-\d\d\b", opening), title
        assert re.search(r"\bcommit [0-9a-f]{7}", opening), title
