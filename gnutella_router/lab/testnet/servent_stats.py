"""A foreign servent's own drop counters, for the test network's report.

The routers' side of a servent (what they sent it, what it sent them) says nothing of
what the servent made of it. gtk-gnutella counts every message it drops by reason, and
its shell prints the counters (``stats drop``): the fastest way to see whether a router
sends something it refuses ("Ancient query format", "Unusable Pong", "Spam"). So the
wrapper contract (docs/servents.md) lets a wrapper offer them: its ``ready:`` line may
end with ``; stats: COMMAND``, a command in shell words that prints the counters, one
``REASON COUNT`` per line, while its servent runs (``scripts/gtk-servent.sh`` offers
``gtk-servent.sh stats DIR``). The testnet runs that command once, after the traffic
and before anything is stopped, and reports the counters beside the servent; a
wrapper that offers none, or a command that fails, costs the report only those lines.

What is parsed is gtk-gnutella's own format (``src/shell/stats.c``,
``shell_exec_stats_drop``: for each reason, its symbolic name from
``src/if/gen/drop.lst`` (``bad_size``, ``duplicate``, ``pong_unusable``, ...), a space
and the count as a plain decimal number, then a newline; ``-p`` adds thousands
separators, which are accepted). The shell's numbered reply lines (``100 Welcome``,
``400-Error for: ...``) have another shape and are skipped. Nothing here does I/O.
"""

from __future__ import annotations

import re
import shlex

__all__ = ["STATS_MARK", "drop_counters", "stats_command"]

STATS_MARK = "; stats: "
"""What separates the ``ready:`` line's own words from the stats command."""
_COUNTER = re.compile(r"\A([a-z][a-z0-9_]*) ([0-9][0-9,']*)\Z")


def stats_command(output: str) -> list[str] | None:
    """The command the wrapper's last ``ready:`` line in ``output`` offers, as argv;
    None when it offers none (or its words do not parse)."""
    for line in reversed(output.splitlines()):
        if line.startswith("ready:"):
            _, marked, command = line.partition(STATS_MARK)
            if not marked:
                return None
            try:
                words = shlex.split(command)
            except ValueError:
                return None
            return words or None
    return None


def drop_counters(text: str) -> dict[str, int]:
    """``stats drop`` output as ``{reason: count}``, in gtk-gnutella's order.

    Raises:
        ValueError: no line of the output is a counter (an error, or not a servent's
            counters at all).
    """
    counters: dict[str, int] = {}
    for line in text.splitlines():
        match = _COUNTER.match(line.strip())
        if match is not None:
            counters[match[1]] = int(re.sub(r"[,']", "", match[2]))
    if not counters:
        first = text.strip().splitlines()[:1]
        raise ValueError(f"no drop counters in the output{': ' + first[0] if first else ''}")
    return counters
