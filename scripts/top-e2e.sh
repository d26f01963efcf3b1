#!/usr/bin/env bash
# End-to-end check of `continuum top --demo` in a real terminal: start it in
# tmux, send keys, capture the pane and assert on the text. Needs tmux.
# Usage: scripts/top-e2e.sh [path/to/continuum]
set -euo pipefail

bin=${1:-}
if [[ -z $bin ]]; then
	bin=$(mktemp -d)/continuum
	go build -o "$bin" ./cmd/continuum
fi
command -v tmux >/dev/null || { echo "top-e2e: tmux is not installed" >&2; exit 1; }

session=continuum-top-e2e-$$
socket=$session
t() { tmux -L "$socket" "$@"; }
cleanup() { t kill-server 2>/dev/null || true; }
trap cleanup EXIT

fail() {
	echo "top-e2e: $1" >&2
	echo "--- pane" >&2
	t capture-pane -p -t "$session" >&2 || true
	exit 1
}

# wait_for TEXT [SECONDS]: poll the pane until it shows TEXT.
wait_for() {
	local deadline=$((SECONDS + ${2:-20}))
	until t capture-pane -p -t "$session" | grep -qF -- "$1"; do
		((SECONDS < deadline)) || fail "timed out waiting for: $1"
		sleep 0.2
	done
}

# wait_gone TEXT: poll the pane until TEXT is gone.
wait_gone() {
	local deadline=$((SECONDS + 10))
	while t capture-pane -p -t "$session" | grep -qF -- "$1"; do
		((SECONDS < deadline)) || fail "still showing: $1"
		sleep 0.2
	done
}

keys() { t send-keys -t "$session" "$@"; }

# run WIDTH HEIGHT ENV...: a user's terminal (CI unset: colour detection may take CI as no terminal).
# wait_quit: poll until top has quit (its pane is dead or gone).
wait_quit() {
	local deadline=$((SECONDS + 10))
	while t has-session -t "$session" 2>/dev/null && t list-panes -t "$session" -F '#{pane_dead}' | grep -q 0; do
		((SECONDS < deadline)) || fail "q did not quit"
		sleep 0.2
	done
}

run() {
	t new-session -d -s "$session" -x "$1" -y "$2" env -u CI TERM=xterm-256color "${@:3}" "$bin" top --demo --interval 300ms
}

# An 80x24 terminal, with colour.
run 80 24
wait_for "prefill (2)" 40
wait_for "decode (2)"
wait_for "fresh"
t capture-pane -e -p -t "$session" | grep -q $'\e\[' || fail "no colour in a terminal without NO_COLOR"

keys 2
wait_for "[2 Subs]"
wait_for "kv_metrics"
wait_for "connected/direct 4"

keys 3
wait_for "selections by role and reason"
wait_for "decode load"
wait_for "KV-aware selections by result"

keys 4
wait_for "discovery events"

keys 1 /
keys -l decode
keys Enter
wait_for "filter: decode"
wait_gone "prefill (2)"

keys Enter
wait_for "worker detail"
keys Escape
wait_for "DECODE/KV BLOCKS"

keys s
wait_for "sort:id"
keys p
wait_for "PAUSED"
keys p

keys '?'
wait_for "cycle sort: load, id, age, selections"
keys x
wait_gone "cycle sort"

keys q
wait_quit
t kill-server 2>/dev/null || true

# NO_COLOR and a wide terminal.
run 160 48 NO_COLOR=1
wait_for "FIRST SEEN" 40
wait_for "fresh"
if t capture-pane -e -p -t "$session" | grep -q $'\e\[[0-9;]*3[0-9;]*m'; then fail "colour with NO_COLOR set"; fi
keys q
wait_quit
t kill-server 2>/dev/null || true

# Its terminal closing (SIGHUP) quits it as q does: the demo's directory
# is removed.
tmp=$(mktemp -d)
run 80 24 TMPDIR="$tmp"
wait_for "fresh" 40
compgen -G "$tmp/continuum-demo-*" >/dev/null || fail "no demo directory under TMPDIR"
t kill-server
deadline=$((SECONDS + 10))
while compgen -G "$tmp/continuum-demo-*" >/dev/null; do
	if ((SECONDS >= deadline)); then
		rm -rf "$tmp"
		echo "top-e2e: the demo's directory outlived SIGHUP" >&2
		exit 1
	fi
	sleep 0.2
done
rm -rf "$tmp"

echo "top-e2e: ok"
