#!/usr/bin/env bash
# The test suite, from a fresh clone: set up .venv, then run pytest (extra args pass on).
# The suite runs on GNUTELLA_TEST_WORKERS pytest-xdist workers (3 by default, even on two
# cores: most of its time is spent waiting on sockets, daemons and child processes);
# GNUTELLA_TEST_WORKERS=0 runs it in one process.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/venv.sh" dev
cd "$root"
workers="${GNUTELLA_TEST_WORKERS:-3}"
parallel=()
if [ "$workers" != 0 ]; then
  parallel=(-n "$workers" --dist worksteal)
fi
exec "${GNUTELLA_VENV:-$root/.venv}/bin/python" -m pytest "${parallel[@]}" "$@"
