#!/usr/bin/env bash
# Make sure .venv exists and holds this project (editable) with its test tools.
# Safe to run every time: it reinstalls only when pyproject.toml has changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${GNUTELLA_VENV:-$root/.venv}"
python="${PYTHON:-python3}"

if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "gnutella-router needs Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
stamp="$venv/.installed-$(sha256sum "$root/pyproject.toml" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$root[dev]"
  rm -f "$venv"/.installed-*
  touch "$stamp"
fi
