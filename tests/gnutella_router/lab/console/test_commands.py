"""The console's command language on its own: parsing, help and completion."""

from __future__ import annotations

import pytest

from gnutella_router.lab.console.commands import (
    COMMANDS,
    DEFAULT_WAIT,
    CommandError,
    command_help,
    completions,
    general_help,
    parse,
)

GUID = "0123456789abcdef0123456789abcdef"
NODES = ["node-0", "node-1", "node-10", "node-2"]


def test_blank_lines_and_comments_are_no_command() -> None:
    assert parse("") is None
    assert parse("   ") is None
    assert parse("# reach 0 later") is None


def test_reach_takes_a_node_words_and_probe_options() -> None:
    command = parse("reach node-2 free jazz --ttl 3 --wait 0.5")
    assert command is not None
    assert command.name == "reach"
    args = command.args
    assert (args.node, args.text, args.ttl, args.wait, args.ping) == (
        "node-2",
        ["free", "jazz"],
        3,
        0.5,
        False,
    )
    defaults = parse("reach 0 --ping")
    assert defaults is not None
    assert (defaults.args.text, defaults.args.ttl, defaults.args.wait, defaults.args.ping) == (
        [],
        None,
        DEFAULT_WAIT,
        True,
    )


def test_words_and_options_mix_in_any_order() -> None:
    command = parse("reach 0 --ttl 3 free jazz")
    assert command is not None
    assert (command.args.text, command.args.ttl) == (["free", "jazz"], 3)


def test_quoted_words_stay_one_argument() -> None:
    command = parse("reach 0 'free jazz' # a comment")
    assert command is not None
    assert command.args.text == ["free jazz"]


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("nodez", "unknown command 'nodez'"),
        ("reach", "the following arguments are required: node"),
        ("reach 0 --ttl 0", "expected a TTL from 1 to 15"),
        ("reach 0 --ttl 16", "expected a TTL from 1 to 15"),
        ("reach 0 --wait 61", "expected seconds from 0 to 60"),
        ("reach 0 --nonsense", "unrecognized arguments: --nonsense"),
        ("follow 1234", "expected a GUID, 32 hex digits"),
        ("link 0 1 sideways", "invalid choice: 'sideways'"),
        ("node 0", "the following arguments are required: state"),
        ("set 0 log-level loud", "log-level takes one of"),
        ("set 0 profiler pause", "profiler takes one of start, stop"),
        ("set 0 mood happy", "invalid choice: 'mood'"),
        ("dump 0 everything", "invalid choice: 'everything'"),
        ("dump 0 routes --limit 100001", "expected a whole number from 0 to 100000"),
        ("help nothing", "no command 'nothing'"),
        ("reach 0 'unbalanced", "cannot split the line"),
        ("nodes extra", "unrecognized arguments: extra"),
    ],
)
def test_bad_lines_are_refused_with_a_reason(line: str, says: str) -> None:
    with pytest.raises(CommandError, match=says):
        parse(line)


def test_aliases_and_leaving() -> None:
    for line in ("quit", "exit", "EOF"):
        command = parse(line)
        assert command is not None
        assert command.name == "quit"
    command = parse("help exit")
    assert command is not None
    assert command.args.command == "quit"


def test_every_command_has_help() -> None:
    listing = general_help()
    for name, spec in COMMANDS.items():
        assert name in listing
        assert spec.summary in listing
        assert command_help(name).startswith(f"usage: {name}")
    assert "--ttl" in command_help("reach")
    assert "POST /peers/hold" in command_help("link")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("", sorted([*COMMANDS, "exit"])),
        ("re", ["reach"]),
        ("reach ", NODES),
        ("reach node-1", ["node-1", "node-10"]),
        ("reach node-1 --", ["--ping", "--ttl", "--wait"]),
        ("reach node-1 --ttl ", []),
        ("link node-0 node-1 ", ["down", "up"]),
        ("link node-0 ", NODES),
        ("link node-0 node-1 up ", []),
        ("node 2 d", ["down"]),
        ("set 0 ", ["log-level", "profiler"]),
        ("set 0 log-level ", ["debug", "error", "info", "warning"]),
        ("set 0 profiler s", ["start", "stop"]),
        ("get node-0 ", ["config", "connections", "holds", "node", "stages", "stats"]),
        ("dump 0 r", ["routes"]),
        ("dump 0 routes --table ", ["ping", "push", "query"]),
        ("dump 0 routes --table q", ["query"]),
        ("dump 0 routes --table query --guid ", []),
        ("follow ", [GUID]),
        ("help l", ["link", "links"]),
        ("nonsense ", []),
        ("nodes ", []),
    ],
)
def test_completion_offers_what_may_come_next(line: str, expected: list[str]) -> None:
    assert completions(line, nodes=NODES, guids=[GUID]) == expected
