"""``gnutella-router check-config``: validate a configuration exactly as ``run`` would.

It reads the same file and flags as ``run``, refuses a bad value with the same message
and exit status 2, and otherwise prints the effective configuration (defaults filled
in) as TOML, which is also a way to start a configuration file. The admin token, if
set, is not printed.
"""

from __future__ import annotations

import argparse
import re
import sys

from gnutella_router.cli.config_flags import add_config_arguments, config_from_args
from gnutella_router.config import ConfigError, config_as_toml


def add_check_config_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    check = commands.add_parser(
        "check-config",
        help="validate a configuration as `run` would and print the effective one",
        description="Load --config FILE and the flags exactly as `run` does; print the "
        "effective configuration as TOML (exit 0), or the error (exit 2).",
    )
    add_config_arguments(check)
    check.set_defaults(handler=cmd_check_config)


def cmd_check_config(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"gnutella-router: configuration error: {exc}", file=sys.stderr)
        return 2
    text = config_as_toml(config)
    if config.admin.token:
        # A secret stays out of terminals and logs; the line says it is set.
        text = re.sub(r"(?m)^token = .*$", "# token = (set; not shown)", text)
    sys.stdout.write(text)
    return 0
