#!/bin/sh
# tests/e2e/test_faults.sh — fault isolation and debugging aids of einrun on
# CPU devices (TAP). Faults are injected with EIN_FAULT (see einworker
# --help). Each failure must end the run within 5 s with one message naming
# the device, its pid, the instruction and the cause; nothing may be left.
set -u
B=${EIN_BUILDDIR:-.}
EINRUN="$B/einrun"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/e2e/lib.sh"
scratch flt

write_ffn ffn.ein

# fault NAME EIN_FAULT PATTERN -- einrun args: expect exit 1 within 25 s
# (a fault missed would hang until the worker or run timeouts, far later;
# the margin is for a loaded 2-core machine).
fault() {
    name=$1; f=$2; pat=$3; shift 4
    rm -f y.npy
    t0=$(date +%s%N)
    EIN_FAULT="$f" "$EINRUN" "$@" > out.txt 2>&1 &
    pid=$!
    wait $pid
    rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    left=$(leftovers $pid)
    if [ "$rc" -ne 1 ]; then not_ok "$name" "exit status $rc, expected 1" "$(cat out.txt)"
    elif ! grep -q -- "$pat" out.txt; then not_ok "$name" "message does not match '$pat':" "$(cat out.txt)"
    elif [ "$ms" -gt 25000 ]; then not_ok "$name" "took $ms ms, more than 25 s"
    elif [ -e y.npy ]; then not_ok "$name" "a failed run left y.npy"
    elif [ -n "$left" ]; then not_ok "$name" "left behind:$left"
    elif [ "$(out_lines out.txt)" -gt 1 ]; then not_ok "$name" "more than one line:" "$(cat out.txt)"
    else ok "$name ($ms ms)"
    fi
}

echo "1..18"
# Under AddressSanitizer a SIGSEGV would be caught and reported by ASan
# itself; let it kill the worker as it would in a normal build.
saved_asan=${ASAN_OPTIONS-}
export ASAN_OPTIONS="${saved_asan:+$saved_asan:}handle_segv=0"
fault "crash (SIGSEGV) mid-run" 1:crash:3 \
    "device 1 (pid [0-9]*) was killed by signal 11 (Segmentation fault) in instruction 3 (" \
    -- --cpu 3 ffn.ein
export ASAN_OPTIONS="$saved_asan"
fault "kill -9 equivalent exit" 2:exit:2 \
    "device 2 (pid [0-9]*) exited with status 7 in instruction 2 (" -- --cpu 3 ffn.ein
fault "hang is detected by heartbeats" 0:hang:1 \
    "device 0 (pid [0-9]*) sent no heartbeat for [0-9]* s; last seen in" -- --cpu 2 --worker-timeout 2 ffn.ein
fault "allocation failure" 2:alloc \
    "device 2 (pid [0-9]*) failed at startup: cannot allocate [0-9]* bytes of device memory" -- --cpu 4 ffn.ein
fault "malformed message to the coordinator" 0:garbage \
    "device 0 (pid [0-9]*) sent a malformed message" -- --cpu 2 ffn.ein
# The peer must wait on the device that sends the garbage: with --objective
# comm device 0 gathers y from device 1 (the default objective finds a plan
# of this small FFN with no message between the devices at all).
fault "malformed message to a peer" 1:peer-garbage \
    "device 0 (pid [0-9]*) failed .*malformed message from a peer" -- --cpu 2 --objective comm ffn.ein
# The same through ZeroMQ (EIN_READY=zmq: the channel before the FIFOs),
# and a receiver that dies while its peer may still send it READYs
# through its FIFO (dropped by the sender, reported by the coordinator).
export EIN_READY=zmq
fault "malformed message to a peer (ZeroMQ)" 1:peer-garbage \
    "device 0 (pid [0-9]*) failed .*malformed message from a peer" -- --cpu 2 --objective comm ffn.ein
unset EIN_READY
fault "a receiver of READYs exits mid-run" 0:exit:4 \
    "device 0 (pid [0-9]*) exited with status 7 in instruction 4 (" -- --cpu 2 --objective comm ffn.ein

# The coordinator itself killed: its workers notice and exit, and clean up.
EIN_FAULT=0:hang:1 "$EINRUN" --cpu 3 ffn.ein > out.txt 2>&1 &
pid=$!
sleep 1
kill -9 $pid
wait $pid 2>/dev/null
sleep 2
left=$(leftovers $pid)
if [ -z "$left" ]; then ok "coordinator killed: workers gone, nothing left"
else not_ok "coordinator killed: left behind:$left"; fi

# Debugging one device: paused worker continues on SIGUSR1.
rm -f y.npy
"$EINRUN" --cpu 3 --debug-worker 1 ffn.ein > out.txt 2>&1 &
pid=$!
wpid=""
for i in $(seq 1 50); do
    wpid=$(sed -n 's/.*device 1 is paused as pid \([0-9]*\).*/\1/p' out.txt)
    [ -n "$wpid" ] && break
    sleep 0.1
done
if grep -q "gdb -p $wpid" out.txt 2>/dev/null && [ -n "$wpid" ]; then ok "--debug-worker prints the gdb command"
else not_ok "--debug-worker prints the gdb command" "$(cat out.txt)"; fi
# Wait for the worker itself to say it is paused (its handler is set).
for i in $(seq 1 100); do
    grep -q "einworker: device 1 paused" out.txt && break
    sleep 0.1
done
[ -n "$wpid" ] && kill -USR1 "$wpid"
wait $pid
rc=$?
if [ "$rc" -eq 0 ] && [ -e y.npy ]; then ok "paused worker continues on SIGUSR1"
else not_ok "paused worker continues on SIGUSR1" "status $rc" "$(cat out.txt)"; fi

# A wrapper around one worker, and a wrapper that cannot run.
rm -f y.npy
if "$EINRUN" --cpu 3 --worker-wrapper '1:env EIN_WRAPPED=1' ffn.ein > out.txt 2>&1 && [ -e y.npy ]; then
    ok "--worker-wrapper K:CMD"
else not_ok "--worker-wrapper K:CMD" "$(cat out.txt)"; fi
fault "wrapper that cannot run" "" "device 0 (pid [0-9]*) exited with status 127 (could not execute /nonexistent/tool) at startup" \
    -- --cpu 2 --worker-wrapper '0:/nonexistent/tool' ffn.ein

# Workers started by hand.
rm -f y.npy
"$EINRUN" --cpu 2 --manual-workers --timeout 20 ffn.ein > out.txt 2>&1 &
pid=$!
cmds=0
for i in $(seq 1 50); do
    cmds=$(grep -c "einworker --device" out.txt)
    [ "$cmds" -eq 2 ] && break
    sleep 0.1
done
grep "einworker --device" out.txt | while read -r line; do sh -c "$line" & done
wait $pid
rc=$?
sleep 0.5
if [ "$cmds" -eq 2 ] && [ "$rc" -eq 0 ] && [ -e y.npy ] && [ -z "$(leftovers $pid)" ]; then ok "--manual-workers"
else not_ok "--manual-workers" "status $rc, $cmds commands" "$(cat out.txt)"; fi

# Logs, traces and iterations.
mkdir -p logs
if "$EINRUN" --cpu 3 --iterations 3 --warmup 1 --trace t.json --log-dir logs --log-level 2 ffn.ein > out.txt 2>&1; then
    ok "iterations, trace and logs run"
else not_ok "iterations, trace and logs run" "$(cat out.txt)"; fi
if grep -q "^3 iterations (after 1 warm-up): min [0-9.]* ms, median [0-9.]* ms" out.txt \
   && [ "$(grep -c "device [0-9]: .* ms kernels" out.txt)" -eq 3 ]; then ok "per-iteration and per-device times"
else not_ok "per-iteration and per-device times" "$(cat out.txt)"; fi
starts=$(grep -c " start " logs/worker-1.log); finishes=$(grep -c " finish " logs/worker-1.log)
if [ "$starts" -gt 0 ] && [ "$starts" -eq "$finishes" ]; then ok "worker log has every instruction started and finished ($starts)"
else not_ok "worker log" "$starts starts, $finishes finishes"; fi
if head -c 1 t.json | grep -q '\[' && grep -q '"ph": "X"' t.json && grep -q '"process_name"' t.json \
   && tail -c 3 t.json | grep -q ']'; then ok "Chrome trace written"
else not_ok "Chrome trace written" "$(head -c 300 t.json)"; fi
exit 0
