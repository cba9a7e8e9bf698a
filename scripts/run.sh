#!/usr/bin/env bash
# The main job, from a fresh clone: set up .venv, then run a local test network
# (defaults: 5 routers on loopback, 20 s of traffic, results in a new folder under
# .gnutella-router/runs, no configuration needed). Arguments pass through to
# `gnutella-router testnet`, e.g.
# --nodes 8 --topology ring, or --duration 0 to stay up until Ctrl-C.
# A single router daemon is `.venv/bin/gnutella-router run`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/venv.sh" plots
exec "${GNUTELLA_VENV:-$root/.venv}/bin/gnutella-router" testnet "$@"
