#!/usr/bin/env bash
# A gtk-gnutella servent for test networks and the live check, on one address only.
#
#   scripts/gtk-servent.sh PORT DIR [HOST]       run one servent in the foreground
#   scripts/gtk-servent.sh shell DIR [CMD...]    its shell: `stats drop`, `nodes`, ...
#   scripts/gtk-servent.sh stats DIR             its drop counters, `REASON COUNT` lines
#
# The contract (what `gnutella-router testnet --servent` and scripts/live_gtk_check.py
# rely on; docs/interop.md says more):
#   * DIR is the servent's own folder (GTK_GNUTELLA_DIR). Unless DIR/config_gnet is
#     there already (a caller may write its own first), a loopback-only configuration
#     (an ultrapeer's, or what GTK_GNUTELLA_MODE asks) is written there: it listens on HOST:PORT
#     (HOST 127.0.0.1 by default) and nowhere else, announces that address, never
#     bootstraps from the internet (no host caches, UDP, DHT, G2, UPnP or NAT-PMP), and
#     shares $SHARE (default DIR/share). DIR/whitelist exempts HOST from gtk-gnutella's
#     connection-flood ban (more than 2 connects a minute from one address).
#   * gtk-gnutella runs as a child of this script, in its process group (kill the group
#     and it goes too). When its port accepts connections the script prints one line,
#     `ready: gtk-gnutella pid PID listening on HOST:PORT; stats: COMMAND`, and keeps
#     running; COMMAND (shell words) prints the servent's drop counters while it runs
#     (`stats DIR` of this script, with the binary and user it runs with). It exits 1
#     with a reason when gtk-gnutella exits first or does not listen within
#     $GTK_GNUTELLA_START_TIMEOUT seconds (default 60).
#   * `stats DIR` prints gtk-gnutella's own drop counters (its shell's `stats drop`: one
#     `REASON COUNT` line per reason) and exits 0, or exits 1 saying why (no servent
#     running in DIR, no counters in its answer).
#   * On SIGTERM, SIGINT or SIGHUP, or when its parent process goes away, it asks
#     gtk-gnutella to shut down through its shell (a Bye to every peer, its files
#     saved), gives it 60 s, then SIGTERM, then SIGKILL; it exits 0 once it is gone.
#
# Environment:
#   GTK_GNUTELLA_BINARY   the gtk-gnutella binary (default: gtk-gnutella on the PATH); a
#                         build as docs/interop.md describes (1.2.3, with the 'ancient
#                         version' limit raised, or it turns itself into a leaf)
#   GTK_GNUTELLA_USER     who runs it when this script runs as root (default gtkg; it
#                         refuses to run as root); "-" runs it as whoever runs this script
#   GTK_GNUTELLA_MODE     ultra (default), leaf or auto, for a configuration written here
#   SHARE                 the folder it shares
set -euo pipefail

usage() { sed -n '2,6p' "$0" >&2; exit 2; }
say() { echo "gtk-servent: $*" >&2; }

binary=${GTK_GNUTELLA_BINARY:-$(command -v gtk-gnutella || true)}
[ -n "$binary" ] && [ -x "$binary" ] || {
  say "no gtk-gnutella binary (set GTK_GNUTELLA_BINARY, or put gtk-gnutella on the PATH)"
  exit 1
}
user=${GTK_GNUTELLA_USER:-gtkg}
if [ "$(id -u)" != 0 ] || [ "$user" = - ]; then user=-; fi

# Run a command as the servent's user, with the servent's folder and nothing else of ours.
as_servent() {
  local dir=$1; shift
  if [ "$user" = - ]; then
    env -i HOME="$dir" PATH=/usr/bin:/bin LANG=C GTK_GNUTELLA_DIR="$dir" "$@"
  else
    runuser -u "$user" -- env -i HOME="$dir" PATH=/usr/bin:/bin LANG=C \
      GTK_GNUTELLA_DIR="$dir" "$@"
  fi
}

if [ "${1:-}" = shell ]; then
  [ $# -ge 2 ] || usage
  dir=$(cd "$2" && pwd); shift 2
  if [ $# -gt 0 ]; then printf '%s\n' "$@" | as_servent "$dir" "$binary" --shell
  else as_servent "$dir" "$binary" --shell; fi
  exit
fi

if [ "${1:-}" = stats ]; then
  [ $# -eq 2 ] || usage
  dir=$(cd "$2" && pwd)
  answer=$(printf 'stats drop\n' | as_servent "$dir" "$binary" --shell 2>&1) || true
  # gtk-gnutella answers `REASON COUNT` per reason; its numbered replies are errors.
  counters=$(printf '%s\n' "$answer" | grep -E '^[a-z][a-z0-9_]* [0-9]+$' || true)
  if [ -z "$counters" ]; then
    say "no drop counters from the servent in $dir: $(printf '%s\n' "$answer" | head -n 2 | tr '\n' ' ')"
    exit 1
  fi
  printf '%s\n' "$counters"
  exit 0
fi

[ $# -ge 2 ] && [ $# -le 3 ] || usage
port=$1; host=${3:-127.0.0.1}
case "$port" in ''|*[!0-9]*) say "PORT must be a number, not '$port'"; exit 2 ;; esac
mkdir -p "$2"
dir=$(cd "$2" && pwd)
share=${SHARE:-$dir/share}
mkdir -p "$share" "$dir/downloads/incomplete" "$dir/downloads/complete" "$dir/downloads/corrupt"
case "${GTK_GNUTELLA_MODE:-ultra}" in
  ultra) peermode=2 ;; leaf) peermode=0 ;; auto) peermode=1 ;;
  *) say "GTK_GNUTELLA_MODE must be ultra, leaf or auto"; exit 2 ;;
esac

if [ ! -e "$dir/config_gnet" ]; then
  # gtk-gnutella reads this at start and rewrites it (with comments) when it exits.
  # Multiple-choice properties are numbers; strings are quoted.
  cat > "$dir/config_gnet" <<EOF
# written by gnutella-router's scripts/gtk-servent.sh: a test servent on $host only
listen_port = $port
force_local_ip = TRUE
forced_local_ip = "$host"
bind_to_forced_local_ip = TRUE
force_local_ip6 = FALSE
network_protocol = 4
configured_peermode = $peermode
current_peermode = $([ "$peermode" = 1 ] && echo 0 || echo "$peermode")
allow_firewalled_ultra = TRUE
is_firewalled = FALSE
stop_host_get = TRUE
enable_udp = FALSE
enable_dht = FALSE
enable_g2 = FALSE
enable_upnp = FALSE
enable_natpmp = FALSE
enable_guess = FALSE
enable_guess_client = FALSE
send_oob_queries = FALSE
process_oob_queries = FALSE
proxy_oob_queries = FALSE
prefer_compressed_gnet = FALSE
tls_enforce = FALSE
use_netmasks = FALSE
online_mode = TRUE
enable_local_socket = TRUE
enable_shell = FALSE
gnet_trace = 3
shared_dirs = "$share"
store_downloading_files_to = "$dir/downloads/incomplete"
move_downloading_files_to = "$dir/downloads/complete"
move_corrupted_files_to = "$dir/downloads/corrupt"
EOF
fi
# An address without a port exempts it from the ban and dials nobody.
[ -e "$dir/whitelist" ] || printf '%s\n' "$host" > "$dir/whitelist"
if [ "$user" != - ]; then
  chown -R "$user:" "$dir"
  chown "$user:" "$share"
fi

rm -f "$dir/gtk-gnutella.pid"
as_servent "$dir" "$binary" --topless --no-supervise --no-restart --no-dbus \
  --log-stderr "$dir/stderr.log" --log-stdout "$dir/stdout.log" \
  < /dev/null > "$dir/console.log" 2>&1 &
child=$!
parent=$PPID

listening() { (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; }
servent_pid() { cat "$dir/gtk-gnutella.pid" 2>/dev/null || echo "$child"; }
kill_tree() {
  # A process and everything it started (runuser, env, the servent), children first.
  local each
  for each in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$each"; done
  kill -KILL "$1" 2>/dev/null || true
}
parent_gone() {
  # Reparented (our parent died): the process that started us no longer waits for us.
  [ "$(awk '/^PPid:/ {print $2}' /proc/$$/status 2>/dev/null)" != "$parent" ]
}

stopping=
stop() {
  [ -n "$stopping" ] && return
  stopping=1
  trap '' TERM INT HUP
  if kill -0 "$child" 2>/dev/null; then
    say "stopping gtk-gnutella (pid $(servent_pid)): shutdown through its shell"
    (printf 'shutdown\n' | as_servent "$dir" "$binary" --shell > /dev/null 2>&1) &
    local shell=$!
    for _ in $(seq 300); do kill -0 "$child" 2>/dev/null || break; sleep 0.2; done
    kill "$shell" 2>/dev/null || true
    if kill -0 "$child" 2>/dev/null; then
      say "no shutdown within 60 s: SIGTERM"
      kill -TERM "$(servent_pid)" "$child" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$child" 2>/dev/null || break; sleep 0.2; done
    fi
    if kill -0 "$child" 2>/dev/null; then
      say "still running: SIGKILL"
      kill -KILL "$(servent_pid)" "$child" 2>/dev/null || true
    fi
  fi
  wait "$child" 2>/dev/null || true
  say "gtk-gnutella stopped"
  exit 0
}
trap stop TERM INT HUP

deadline=$(( $(date +%s) + ${GTK_GNUTELLA_START_TIMEOUT:-60} ))
until listening; do
  if ! kill -0 "$child" 2>/dev/null; then
    wait "$child" && status=0 || status=$?
    say "gtk-gnutella exited (status $status) before it listened; see $dir/stderr.log"
    tail -n 5 "$dir/stderr.log" "$dir/console.log" >&2 2>/dev/null || true
    exit 1
  fi
  if [ "$(date +%s)" -ge "$deadline" ]; then
    say "gtk-gnutella did not listen on $host:$port within ${GTK_GNUTELLA_START_TIMEOUT:-60} s"
    trap '' TERM INT HUP
    kill_tree "$child"
    kill -KILL "$(servent_pid)" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
    exit 1
  fi
  parent_gone && stop
  sleep 0.2
done
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
stats=$(printf '%q ' env "GTK_GNUTELLA_BINARY=$binary" "GTK_GNUTELLA_USER=$user" "$self" stats "$dir")
echo "ready: gtk-gnutella pid $(servent_pid) listening on $host:$port; stats: ${stats% }"

while kill -0 "$child" 2>/dev/null; do
  parent_gone && stop
  sleep 1
done
wait "$child" && status=0 || status=$?
say "gtk-gnutella exited by itself (status $status); see $dir/stderr.log"
exit 1
