#!/bin/sh
# tests/e2e/test_control_fifo.sh — START and DONE between the coordinator and
# the workers of one host go through FIFOs once ZeroMQ holds nothing that a
# START could overtake (coordinator/run/co_run_int.h); EIN_READY=zmq keeps
# every message in ZeroMQ. The workers' logs say which channel carried each
# START and DONE; both channels give the same bytes. (TAP)
set -u
B=${EIN_BUILDDIR:-.}
EINRUN="$B/einrun"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/e2e/lib.sh"
scratch cfifo
echo "1..7"

write_ffn ffn.ein
# run OUT LOGDIR [env...]: 5 iterations on 2 CPU devices, logs in LOGDIR
run() {
    out=$1; logs=$2; shift 2
    mkdir -p "$logs"
    env "$@" "$EINRUN" --cpu 2 --objective comm --iterations 5 --log-dir "$logs" \
        --output "y=$out" ffn.ein > run.txt 2>&1
}
count() { grep -c "$1" "$2" 2>/dev/null || true; }

if run y_fifo.npy logs_fifo; then ok "a run with FIFOs"
else not_ok "a run with FIFOs" "$(cat run.txt)"; fi
# The first START goes through ZeroMQ (the PROGRAM before it is not known
# to be read); every later one through the FIFO, on both devices.
for d in 0 1; do
    l=logs_fifo/worker-$d.log
    z=$(count "started (START through ZeroMQ)" "$l"); f=$(count "started (START through the FIFO)" "$l")
    df=$(count "DONE through the FIFO" "$l")
    if [ "$z" -eq 1 ] && [ "$f" -eq 4 ] && [ "$df" -ge 4 ]; then
        ok "device $d: START 1 through ZeroMQ, 4 through the FIFO; DONE through the FIFO"
    else
        not_ok "device $d: START and DONE channels" "ZeroMQ starts $z, FIFO starts $f, FIFO dones $df" \
            "$(grep -e 'started (' -e 'DONE through' "$l" | head -12)"
    fi
done
if EIN_READY=zmq run y_zmq.npy logs_zmq; then ok "a run with EIN_READY=zmq"
else not_ok "a run with EIN_READY=zmq" "$(cat run.txt)"; fi
f=$(cat logs_zmq/worker-*.log | grep -c "through the FIFO" || true)
z=$(cat logs_zmq/worker-*.log | grep -c "started (START through ZeroMQ)" || true)
if [ "$f" -eq 0 ] && [ "$z" -eq 10 ]; then ok "EIN_READY=zmq: every START and DONE through ZeroMQ"
else not_ok "EIN_READY=zmq: every START and DONE through ZeroMQ" "$f through a FIFO, $z ZeroMQ starts"; fi
if [ -s y_fifo.npy ] && cmp -s y_fifo.npy y_zmq.npy; then ok "the same bytes through either channel"
else not_ok "the same bytes through either channel" "$(ls -l y_fifo.npy y_zmq.npy 2>&1)"; fi
left=$(ls -d einrun.* 2>/dev/null)
if [ -z "$left" ]; then ok "no run directory (nor its FIFOs) left"
else not_ok "no run directory (nor its FIFOs) left" "$left"; fi
exit 0
