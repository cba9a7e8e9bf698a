#!/usr/bin/env bash
# Make sure .venv exists and holds this project (editable).
#   scripts/venv.sh          what running needs (the daemon, testnet, load, dump...)
#   scripts/venv.sh dev      that, plus plots and the test and lint tools
#   scripts/venv.sh plots    that, plus matplotlib for the figures
# Safe to run every time: it installs only when pyproject.toml changed or the asked-for
# extra is missing (an environment with dev has everything runtime needs). When it does,
# it says so on stderr, step by step: the first install takes minutes and pip is quiet.
set -euo pipefail
say() { echo "scripts/venv.sh: $*" >&2; }
started=$SECONDS
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${GNUTELLA_VENV:-$root/.venv}"
python="${PYTHON:-python3}"
extra="${1:-runtime}"
case "$extra" in
  runtime) spec="$root" ;;
  dev|plots) spec="$root[$extra]" ;;
  *) echo "scripts/venv.sh: unknown extra '$extra' (runtime, plots or dev)" >&2; exit 2 ;;
esac

if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "gnutella-router needs Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  say "creating $venv (with $("$python" -c 'import sys; print(sys.executable)'))"
  "$python" -m venv "$venv"
fi
# The build compiles the hot modules listed in gnutella_router/native.py (where it can),
# and a compiled module runs in place of its source: a change to any of them means
# rebuilding.
hot=$(sed -n 's/^    "\(.*\.py\)",$/\1/p' "$root/gnutella_router/native.py")
hash="$(cd "$root" && cat pyproject.toml hatch_build.py gnutella_router/native.py $hot | sha256sum | cut -c1-16)"
# Compiled or pure Python (GNUTELLA_ROUTER_PURE=1, see hatch_build.py) is part of what
# was installed: asking for the other one reinstalls.
mode=compiled
case "${GNUTELLA_ROUTER_PURE:-}" in ""|0) ;; *) mode=pure ;; esac
stamp="$venv/.installed-$hash-$mode-$extra"
if [ -f "$stamp" ] || { [ "$extra" != dev ] && [ -f "$venv/.installed-$hash-$mode-dev" ]; }; then
  exit 0
fi
what="what running needs"
case "$extra" in
  dev) what="what running needs, the plot, test and lint tools" ;;
  plots) what="what running needs and matplotlib" ;;
esac
say "installing gnutella-router ($what) into $venv; the first time this takes a few"
say "minutes: pip downloads and builds the dependencies quietly, and the build compiles"
say "the routing hot path with mypyc where a C compiler is at hand (GNUTELLA_ROUTER_PURE=1: not)"
say "upgrading pip"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
say "installing (pip install -e '$spec')"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$spec"
# Whether the build compiled the hot path (it falls back to pure Python quietly).
"$venv/bin/python" -c 'from gnutella_router import native; print("gnutella-router:", native.describe())'
say "ready in $((SECONDS - started)) s"
# Stamps of an older pyproject.toml, or of the other mode, no longer say anything.
find "$venv" -maxdepth 1 -name '.installed-*' ! -name ".installed-$hash-$mode-*" -delete
touch "$stamp"
