#!/usr/bin/env bash
# Model-checks weft's sleep/wake handshake (models/handshake.pml) with SPIN.
#
#   sound model               must verify: no assertion violation, no invalid end state,
#                             and the stronger hand-off and counter checks
#                             (-DCHECK_HANDOFF -DCHECK_SEARCHING_WRAP)
#   short-work model          must verify with the last searcher free to skip its
#                             hand-off (-DSHORT_WORK): no lost wakeup still
#   unsound model (-DUNSOUND) must fail: the running-counter shortcut loses a wake
#
# Exits non-zero if the sound model fails or the unsound one passes. Everything SPIN
# and gcc generate goes to a temporary directory, which is removed at the end.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
start=$SECONDS

if ! command -v spin >/dev/null; then
    (apt-get update && apt-get install -y spin) >/dev/null
fi
command -v gcc >/dev/null || { echo "check.sh: gcc is needed to compile pan" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# verify NAME SPIN_FLAGS GCC_FLAGS: generate, compile and run pan in $work/NAME.
# Sets: dir, errors, states, depth, first (pan's first error line, if any).
verify() {
    dir="$work/$1"
    mkdir -p "$dir"
    cp "$here/handshake.pml" "$dir/"
    (
        cd "$dir"
        # shellcheck disable=SC2086
        spin $2 -a handshake.pml >spin.out
        # -w: pan.c trips harmless gcc warnings. -DSAFETY: assertions and end states.
        # shellcheck disable=SC2086
        gcc -O2 -w -DSAFETY $3 -o pan pan.c
        # -m: depth bound far above the model's (~130), so a search is never cut short.
        ./pan -m100000 >pan.out 2>&1 || true
    )
    errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$dir/pan.out" | head -n1)
    states=$(awk '$2 == "states," && $3 == "stored" { print $1; exit }' "$dir/pan.out")
    depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$dir/pan.out" | head -n1)
    first=$(grep -m1 '^pan:1:' "$dir/pan.out" || true)
    if [ -z "$errors" ] || [ -z "$states" ]; then
        echo "check.sh: could not read pan's output for the $1 model:" >&2
        cat "$dir/pan.out" >&2
        exit 1
    fi
}

# expect_verified NAME LABEL SPIN_FLAGS WHAT: the NAME model must verify (no error, and
# a search that was not cut short); prints one line, or on failure pan's output and the
# error trail.
expect_verified() {
    verify "$1" "$3" ""
    if [ "$errors" -eq 0 ] && ! grep -q 'max search depth too small\|Search not completed' "$dir/pan.out"; then
        echo "$2 $states states, depth $depth, errors: 0 -> OK ($4)"
    else
        echo "$2 $states states, depth $depth, errors: $errors -> FAILED"
        cat "$dir/pan.out"
        # shellcheck disable=SC2086
        if [ -f "$dir/handshake.pml.trail" ]; then (cd "$dir" && spin $3 -t -p -B handshake.pml); fi
        status=1
    fi
}

status=0

# ---- the handshake as weft implements it: depth-first, full state space ------------
expect_verified sound "sound model:  " "-DCHECK_HANDOFF -DCHECK_SEARCHING_WRAP" \
    "no lost wakeup, no invalid end state, hand-off, counter never wraps"

# ---- with the wake-worth heuristic: the hand-off may be skipped, nothing is lost ----
expect_verified short "short-work:   " "-DSHORT_WORK -DCHECK_SEARCHING_WRAP" \
    "no lost wakeup when the last searcher may skip its hand-off"

# ---- with the unsound shortcut: breadth-first, so the trail is a shortest one ------
verify unsound "-DUNSOUND" "-DBFS"
if [ "$errors" -gt 0 ]; then
    case "$first" in
        *"assertion violated"*) what="NO_LOST_WAKEUP assertion violated at depth ${first##*depth }"; what=${what%)} ;;
        *) what="${first#pan:1: }" ;;
    esac
    echo "unsound model: $states states, depth $depth, errors: $errors -> violation found, as expected: $what"
    echo "  counterexample (pid 3 = Worker(0), pid 4 = Worker(1); source comment in /* */):"
    (cd "$dir" && spin -DUNSOUND -t -p -B handshake.pml) |
        awk -F'\t' -v src="$dir/handshake.pml" '
            BEGIN { while ((getline l < src) > 0) { n++; line[n] = l } }
            /^ *[0-9]+:\tproc/ {
                split($2, p, /[ ()]+/)       # proc, pid, name, file:line, ...
                if (p[3] == ":init::1" || p[3] == "Monitor:1") {
                    if (p[3] == "Monitor:1")
                        print "    -> Monitor: NO_LOST_WAKEUP fails: a task is queued, both workers are blocked, no notify is in flight"
                    next
                }
                who = p[3] == "Producer:1" ? "Producer" : "Worker(" p[2] - 3 ")"
                split(p[4], fl, ":"); ln = fl[2]
                c = index(line[ln], "/*"); note = c ? substr(line[ln], c) : ""
                printf "    %3d %-9s %-34s %s\n", $1, who, $2 == "" ? "" : $3, note
            }'
else
    echo "unsound model: $states states, depth $depth, errors: 0 -> NOT DETECTED (the model no longer catches the lost wake)"
    status=1
fi

echo "spin models: $((SECONDS - start)) s"
exit "$status"
