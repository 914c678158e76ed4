#!/bin/sh
# tests/e2e/test_einnode_stdin.sh — no agent outlives its run: einnode
# --keys-stdin (how every launched agent gets its CURVE keys) whose standard
# input ends before the keys arrive exits at once with a message saying so;
# a SIGTERM ends it while it waits for them, and once it has them and runs
# (its coordinator unreachable), with nothing of it left behind (TAP).
set -u
B=${EIN_BUILDDIR:-.}
NODE="$(cd "$B" && pwd)/einnode"
WORKER="$(cd "$B" && pwd)/einworker"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
S=$(mktemp -d "${TMPDIR:-/tmp}/ein-node.XXXXXX") || exit 1
export TMPDIR="$S"
cd "$S" || exit 1
. "$SRC/tests/e2e/lib.sh"
pids=""
trap 'for p in $pids; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$S"' EXIT
echo "1..3"
n=0
args="--coordinator tcp://127.0.0.1:9 --host 1 --devices 0 --ndevices 1 --worker $WORKER --keys-stdin"

# gone PID TENTHS: 0 once PID has exited (within TENTHS tenths of a second).
gone() {
    i=0
    while kill -0 "$1" 2>/dev/null; do
        [ $i -ge "$2" ] && return 1
        sleep 0.1; i=$((i + 1))
    done
    return 0
}

# 1. Standard input ends before the keys.
"$NODE" $args < /dev/null > out1.txt 2>&1 &
p=$!; pids="$pids $p"
if ! gone $p 50; then
    not_ok "an input that ends before the keys ends einnode" "still running after 5 s:" "$(cat out1.txt)"
elif wait $p; then
    not_ok "an input that ends before the keys ends einnode" "exit status 0:" "$(cat out1.txt)"
elif ! grep -q "standard input ended before the three CURVE keys" out1.txt; then
    not_ok "an input that ends before the keys ends einnode" "no message:" "$(cat out1.txt)"
else
    ok "an input that ends before the keys ends einnode, saying so"
fi

# 2. A SIGTERM while it waits for the keys (its input open, empty).
mkfifo keys2
"$NODE" $args < keys2 > out2.txt 2>&1 &
p=$!; pids="$pids $p"
exec 3> keys2
sleep 0.5
kill -TERM $p
if gone $p 30; then ok "SIGTERM ends einnode waiting for its keys"
else not_ok "SIGTERM ends einnode waiting for its keys" "still running after 3 s:" "$(cat out2.txt)"
fi
exec 3>&-

# 3. A SIGTERM once it has its keys and runs (the coordinator unreachable):
# it ends, and so do its workers.
mkfifo keys3
"$NODE" $args < keys3 > out3.txt 2>&1 &
p=$!; pids="$pids $p"
exec 4> keys3
z=0000000000000000000000000000000000000000
printf 'EIN_CURVE_SERVER=%s\nEIN_CURVE_PUBLIC=%s\nEIN_CURVE_SECRET=%s\n' $z $z $z >&4
sleep 1
kill -TERM $p
left=""
if gone $p 50; then
    sleep 0.5
    # (einnode or einworker of this scratch directory still running)
    left=$(grep -lsaE "einworker|einnode" $(grep -lsaF -- "$S" /proc/[0-9]*/cmdline) \
        2>/dev/null | head -3)
fi
if kill -0 $p 2>/dev/null; then
    not_ok "SIGTERM ends a running einnode" "still running after 5 s:" "$(cat out3.txt)"
elif [ -n "$left" ]; then
    not_ok "SIGTERM ends a running einnode" "processes left: $left"
else
    ok "SIGTERM ends a running einnode and its workers"
fi
exec 4>&-
