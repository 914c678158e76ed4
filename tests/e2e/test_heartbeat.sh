#!/bin/sh
# tests/e2e/test_heartbeat.sh — heartbeats during long instructions (TAP).
# One instruction may take longer than --worker-timeout: a LOAD or STORE
# that makes progress, or a kernel shorter than --instr-timeout, must not be
# reported as a hang; a kernel past --instr-timeout must be (see
# worker/wk_beat.h). Slow instructions are injected with EIN_FAULT=DEV:slow
# (4 s more), LOAD and STORE are cut into tiny slabs with EIN_SLAB_BYTES.
set -u
B=${EIN_BUILDDIR:-.}
EINRUN="$B/einrun"
NPYTOOL="$B/tests/e2e/npytool"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/e2e/lib.sh"
scratch hb

write_ffn ffn.ein
mkdir -p logs

echo "1..7"
"$NPYTOOL" write x.npy f32 7 37 24 > /dev/null
IN="--input x=x.npy --generate-missing"

# The reference: no hook.
if "$EINRUN" --cpu 2 $IN --output y=ref.npy ffn.ein > out.txt 2>&1; then ok "reference run"
else not_ok "reference run" "$(cat out.txt)"; fi

# LOAD and STORE in slabs of 200 bytes (a few rows each) give the same bytes.
if EIN_SLAB_BYTES=200 "$EINRUN" --cpu 2 $IN --output y=slab.npy ffn.ein > out.txt 2>&1 \
   && cmp -s ref.npy slab.npy; then ok "LOAD and STORE in slabs give the same result"
else not_ok "LOAD and STORE in slabs give the same result" "$(cat out.txt)"; fi
if EIN_SLAB_BYTES=200 "$EINRUN" --cpu 3 --output y=slab_r.npy ffn.ein > out.txt 2>&1 \
   && "$EINRUN" --cpu 3 --output y=ref_r.npy ffn.ein > out2.txt 2>&1 \
   && cmp -s ref_r.npy slab_r.npy; then ok "random inputs in slabs give the same values"
else not_ok "random inputs in slabs give the same values" "$(cat out.txt out2.txt)"; fi

# slow NAME EIN_FAULT KIND -- einrun args: the run succeeds with y.npy equal
# to the reference, and instruction INSTR of device 0 was of kind KIND.
slow() {
    name=$1; f=$2; kind=$3; shift 4
    rm -f y.npy logs/*
    if EIN_FAULT="$f" "$EINRUN" "$@" $IN --output y=y.npy --log-dir logs --log-level 2 \
         ffn.ein > out.txt 2>&1; then rc=0; else rc=$?; fi
    instr=${f##*:}
    case "$instr" in slow) instr=0 ;; esac
    if [ "$rc" -ne 0 ]; then not_ok "$name" "exit status $rc" "$(cat out.txt)"
    elif ! grep -q " start $instr $kind " logs/worker-0.log; then
        not_ok "$name" "instruction $instr is not a $kind:" "$(grep ' start ' logs/worker-0.log)"
    elif ! cmp -s ref.npy y.npy; then not_ok "$name" "y.npy differs from the reference"
    else ok "$name"
    fi
}
slow "a LOAD slower than --worker-timeout is no hang" 0:slow load -- --cpu 2 --worker-timeout 1.5
slow "a kernel slower than --worker-timeout is no hang" 0:slow:3 kernel -- --cpu 2 --worker-timeout 1.5

# Past --instr-timeout, the heartbeat stops: a kernel stuck for good is found.
rm -f y.npy
EIN_FAULT=0:slow:3 "$EINRUN" --cpu 2 --worker-timeout 1.5 --instr-timeout 1 $IN --output y=y.npy \
    ffn.ein > out.txt 2>&1
rc=$?
if [ "$rc" -eq 1 ] && grep -q "device 0 (pid [0-9]*) sent no heartbeat for [0-9]* s; last seen in instruction 3 (kernel" out.txt \
   && [ ! -e y.npy ]; then ok "a kernel past --instr-timeout is reported as hung"
else not_ok "a kernel past --instr-timeout is reported as hung" "exit status $rc" "$(cat out.txt)"; fi

# A worker stuck between instructions is still reported, heartbeat thread or not.
EIN_FAULT=0:hang:2 "$EINRUN" --cpu 2 --worker-timeout 1.5 ffn.ein > out.txt 2>&1
rc=$?
if [ "$rc" -eq 1 ] && grep -q "device 0 (pid [0-9]*) sent no heartbeat for [0-9]* s; last seen in instruction 2" out.txt
then ok "a hung worker is still reported"
else not_ok "a hung worker is still reported" "exit status $rc" "$(cat out.txt)"; fi
exit 0
