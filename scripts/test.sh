#!/usr/bin/env bash
# The test suite, from a fresh clone: set up .venv, then run pytest (extra args pass on).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/venv.sh" dev
cd "$root"
exec "${GNUTELLA_VENV:-$root/.venv}/bin/python" -m pytest "$@"
