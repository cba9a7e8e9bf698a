#!/usr/bin/env bash
# The main job, from a fresh clone: set up .venv, then decode and print a sample
# Gnutella capture (pass a capture file to decode that instead).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/venv.sh"
exec "${GNUTELLA_VENV:-$root/.venv}/bin/gnutella-router" decode "$@"
