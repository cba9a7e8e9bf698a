#!/usr/bin/env bash
# The main job, from a fresh clone: set up .venv, then run the router daemon
# (defaults: listen on 127.0.0.1:6346, no configuration file needed). Arguments pass
# through to `gnutella-router run`, e.g. --seed HOST:PORT or --config FILE.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/venv.sh"
exec "${GNUTELLA_VENV:-$root/.venv}/bin/gnutella-router" run "$@"
