"""Argument types shared by the commands: each refuses a nonsensical value in one line.

argparse turns an :class:`argparse.ArgumentTypeError` into ``PROG: error: argument
--FLAG: MESSAGE`` and exit status 2, which is what every command wants for a bad value.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Iterable
from typing import Any

from gnutella_router.config import ConfigError, parse_host_port
from gnutella_router.lab.traffic.replay import ReplayError, parse_target
from gnutella_router.observe.admin_client import TOKEN_ENVIRONMENT
from gnutella_router.run_folder import add_out_arguments


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default once: appended as ``(default: X)`` unless the help
    already says what the default is (in its own words, which say more than a bare
    value), or there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default is None or "default" in text.lower():
            return text
        return super()._get_help_string(action)


def positive(text: str) -> float:
    """A finite number above zero."""
    value = _number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive number")
    return value


def non_negative(text: str) -> float:
    """A finite number, zero or more."""
    value = _number(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number, 0 or more")
    return value


def count(low: int, high: int) -> Callable[[str], int]:
    """A whole number from ``low`` to ``high``."""

    def parse(text: str) -> int:
        if not text.isdigit() or not low <= int(text) <= high:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number {low} to {high}")
        return int(text)

    return parse


def loopback_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` on this machine: traffic tools never aim anywhere else (the rule is
    :func:`gnutella_router.lab.traffic.replay.parse_target`'s)."""
    try:
        return parse_target(text)
    except ReplayError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def admin_address(text: str) -> tuple[str, int]:
    """A router's admin interface, ``HOST:PORT`` (any host: it may be remote, with a
    token)."""
    try:
        return parse_host_port(text, key="--admin", allow_port_zero=False)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number")
    return value


def option_values(args: argparse.Namespace, dests: Iterable[str]) -> dict[str, Any]:
    """The parsed values of the options ``dests``, by dest: the keyword arguments of
    settings whose fields are named after the options that set them, so that each such
    name is written once, in its command's table, rather than as ``name=args.name``."""
    return {dest: getattr(args, dest) for dest in dests}


def add_run_folder_arguments(parser: argparse.ArgumentParser) -> None:
    """``--out`` and ``--overwrite``: where a kept run goes (see
    :mod:`gnutella_router.run_folder`)."""
    add_out_arguments(parser)


class _DeprecatedSpelling(argparse.Action):
    """An old spelling of an option: still works, with a warning naming the new one."""

    def __init__(self, option_strings: list[str], dest: str, new: str, **kwargs: object) -> None:
        self.new = new
        super().__init__(option_strings, dest, **kwargs)  # type: ignore[arg-type]

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(
            f"{parser.prog}: warning: {option_string} is deprecated here, use {self.new} "
            "(--seed names a peer's HOST:PORT in `run` and `testnet`; a random seed is "
            "--random-seed everywhere)",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, values)


def add_random_seed(
    parser: argparse.ArgumentParser, what: str, *, old: str, default: int = 1
) -> None:
    """``--random-seed N`` (seeding ``what``), and its old spelling ``old`` kept as a
    deprecated alias (hidden from help): ``--seed`` meant an address in some commands
    and a random seed in others."""
    formatter = parser.formatter_class
    shows_defaults = isinstance(formatter, type) and issubclass(formatter, DefaultsHelpFormatter)
    parser.add_argument(
        "--random-seed",
        type=int,
        default=default,
        metavar="N",
        help=f"seed of {what}" + ("" if shows_defaults else f" (default {default})"),
    )
    parser.add_argument(
        old,
        dest="random_seed",
        type=int,
        action=_DeprecatedSpelling,
        new="--random-seed",
        help=argparse.SUPPRESS,
    )


def add_admin_arguments(parser: argparse.ArgumentParser) -> None:
    """``--admin`` and ``--token`` of a traffic tool, which sets the router's own
    counters beside its figures (see :func:`admin_for_target`)."""
    parser.add_argument(
        "--admin",
        default="auto",
        metavar="HOST:PORT|auto|off",
        help="the router's admin interface, whose counters are set beside ours; auto: the "
        "target's port + 1 (where a router puts it unless told otherwise), used if it "
        "answers; off: none",
    )
    parser.add_argument(
        "--token",
        help="the router's admin token, to read its counters when it has one (default: "
        f"${TOKEN_ENVIRONMENT})",
    )


def admin_for_target(text: str, target: tuple[str, int]) -> tuple[str, int] | None:
    """``--admin``: off, auto (the target's port + 1) or a loopback ``HOST:PORT``.

    Raises:
        argparse.ArgumentTypeError: not one of those.
    """
    if text == "off":
        return None
    if text == "auto":
        return (target[0], target[1] + 1)
    return loopback_address(text)
