#!/bin/sh
# tests/exchange/test_exprog_tool.sh — the exprog command line (TAP):
# check, simulate (the paper's examples), synth, traces, errors.
set -u
B=${EIN_BUILDDIR:-.}
SRC=${EIN_SRCDIR:-..}
X="$B/tools/exprog"
P="$SRC/tests/exchange/programs"
S=$(mktemp -d "${TMPDIR:-/tmp}/exprog-test.XXXXXX") || exit 1
trap 'rm -rf "$S"' EXIT
. "$SRC/tests/tap.sh" # ok, not_ok (check is this test's own: NAME EXPR)
check() { if eval "$2"; then ok "$1"; else not_ok "$1" "$(head -c 600 "$S/out" 2>/dev/null)"; fi; }
# ms_near FILE WANT: the last line is "makespan: X ms" with X within 2% of WANT.
# synth_at_most FILE MS: synth's last line is "# makespan: X ms" with X <= MS.
synth_at_most() {
    tail -n 1 "$1" | awk -v w="$2" '$2 == "makespan:" && $3 <= w { f = 1 } END { exit !f }'
}
ms_near() {
    tail -n 1 "$1" | awk -v w="$2" '$1 == "makespan:" && $3 == "ms" && $2 >= w * 0.98 && $2 <= w * 1.02 { f = 1 } END { exit !f }'
}

echo "1..31"

"$X" check "$P/ex5_1.xp" > "$S/out" 2>&1
check "check: Ex. 5.1 is valid" '[ $? -eq 0 ] && grep -q "valid" "$S/out"'

"$X" check "$P/ex5_3.xp" > "$S/out" 2>&1
check "check: Ex. 5.3 valid with G1 = {0,1,4,5}" 'grep -q "valid with G1 = {0, 1, 4, 5}, G2 = {2, 3, 6, 7}" "$S/out"'

"$X" check "$P/ex5_3_preamble.xp" > "$S/out" 2>&1; rc=$?
check "check: a preamble alone is not valid (exit 2)" '[ $rc -eq 2 ] && grep -q "not valid" "$S/out"'

printf 'IN: A @ 0\nOUT: A @ 1\nA @ 0 => 1\n' > "$S/bad.xp"
"$X" check "$S/bad.xp" > "$S/out" 2>&1; rc=$?
check "check: a syntax error names file:line:col, exits 2" '[ $rc -eq 2 ] && grep -q "bad.xp:3:7:.*expected" "$S/out"'

"$X" check "$S/missing.xp" > "$S/out" 2>&1; rc=$?
check "check: a missing file is an error (exit 2)" '[ $rc -eq 2 ] && grep -q "cannot open" "$S/out"'

"$X" simulate --topology dgx-h100 "$P/ex5_1.xp" > "$S/out" 2>&1
check "simulate: Ex. 5.1 on dgx-h100 about 3.1 ms" 'ms_near "$S/out" 3.1'
check "simulate: Ex. 5.1 transfers about 2.2 ms" 'grep -q "transfers busy: 2.22" "$S/out"'

"$X" simulate --quiet --topology dgx-h100 "$P/ex5_2.xp" > "$S/out" 2>&1
check "simulate: Ex. 5.2 on dgx-h100 about 6.2 ms" 'ms_near "$S/out" 6.2'

"$X" simulate --topology dgx-v100 --trace "$S/t.json" "$P/ex5_3.xp" > "$S/out" 2>&1
check "simulate: Ex. 5.3 on dgx-v100 about 67 ms" 'ms_near "$S/out" 67'
check "simulate: Ex. 5.3 uses no PCIe" '! grep -q pcie "$S/out"'
check "simulate: --trace writes Chrome-trace JSON" 'grep -q traceEvents "$S/t.json"'

"$X" simulate --topology "$SRC/topologies/dgx-v100.topo" --quiet "$P/ex5_3.xp" > "$S/out" 2>&1
check "simulate: a topology file works like the built-in" 'ms_near "$S/out" 67'

"$X" simulate --topology dgx-q999 "$P/ex5_1.xp" > "$S/out" 2>&1; rc=$?
check "simulate: an unknown topology is an error (exit 2)" '[ $rc -eq 2 ] && grep -q "unknown topology" "$S/out"'

"$X" synth --topology dgx-v100 --steps 10000 --cap-ms 0 --patience 0 --seed 1 "$P/ex5_3_preamble.xp" > "$S/synth.xp" 2> "$S/out"
check "synth: Ex. 5.3 from its preamble, at most 67 ms" 'synth_at_most "$S/synth.xp" 67'
check "synth: the naive makespan is reported" 'grep -q "^# naive makespan: 513" "$S/synth.xp"'

"$X" check "$S/synth.xp" > "$S/out" 2>&1
check "synth: its output is a valid program" '[ $? -eq 0 ]'

"$X" synth "$P/ex5_1.xp" > "$S/out" 2>&1; rc=$?
check "usage: synth without --topology exits 2" '[ $rc -eq 2 ]'

printf 'IN: A @ 0\nOUT: A @ 1\nA @ 0 -> 1 -> 0 -> 1\n' > "$S/relay.xp"
"$X" check "$S/relay.xp" > "$S/out" 2>&1; rc=$?
check "check: a relay back through its source is refused (exit 2)" '[ $rc -eq 2 ] && grep -q "relay.xp:3:1: relay hop 2: site 0 is already on the path" "$S/out"'

printf 'IN: A @ 610234OUT:' > "$S/big.xp"
"$X" check "$S/big.xp" > "$S/out" 2>&1; rc=$?
check "check: a site number over the cap is refused (exit 2)" '[ $rc -eq 2 ] && grep -q "big.xp:1:9: expected a site number from 0 to 4095" "$S/out"'

"$X" synth --topology dgx-v100 --steps 1e3x "$P/ex5_3_preamble.xp" > "$S/out" 2>&1; rc=$?
check "usage: a bad --steps value exits 2" '[ $rc -eq 2 ] && grep -q "steps .1e3x.: expected an integer" "$S/out"'

"$X" synth --topology dgx-v100 --seed -1 "$P/ex5_3_preamble.xp" > "$S/out" 2>&1; rc=$?
check "usage: a bad --seed value exits 2" '[ $rc -eq 2 ] && grep -q "expected a non-negative integer" "$S/out"'

"$X" simulate --topology dgx-h100 --trace "$S/no/such/dir/t.json" "$P/ex5_1.xp" > "$S/out" 2>&1; rc=$?
check "simulate: a trace that cannot be written is a failure (exit 1)" '[ $rc -eq 1 ] && grep -q "cannot write" "$S/out"'

printf 'name t\ngpus 2\nhbm 1 TB/s\nlink 0 1 5 GB/s\nlink 0 1 5 GB/s\n' > "$S/t.topo"
"$X" simulate --topology "$S/t.topo" "$P/ex5_1.xp" > "$S/out" 2>&1; rc=$?
check "simulate: a bad topology file says what and what was expected (exit 2)" '[ $rc -eq 2 ] && grep -q "t.topo:5:1: link 0 1 given twice; expected one link statement per pair" "$S/out"'

mkfifo "$S/fifo.xp"
timeout 20 "$X" check "$S/fifo.xp" > "$S/out" 2>&1; rc=$?
check "check: a FIFO is refused, not read (exit 2, no hang)" '[ $rc -eq 2 ] && grep -q "fifo.xp: a FIFO, not a regular file" "$S/out"'

head -c 17000000 /dev/zero | tr '\0' '#' > "$S/big.xp"
"$X" check "$S/big.xp" > "$S/out" 2>&1; rc=$?
check "check: a file over 16 MiB is refused (exit 2)" '[ $rc -eq 2 ] && grep -q "over the limit of 16 MiB" "$S/out"'

"$X" bound --topology dgx-a100 --latency-us 0 "$P/allreduce8.xp" > "$S/out" 2>&1; rc=$?
check "bound: all-reduce 8 x 1 GB on dgx-a100 is 14 GB over 8 ports (5.833 ms)" '[ $rc -eq 0 ] && tail -n 1 "$S/out" | grep -qx "bound: 5.833 ms"'

"$X" simulate --topology dgx-v100 --latency-us 0 --quiet "$P/ex5_3.xp" > "$S/out" 2>&1
check "simulate: --latency-us 0 gives Ex. 5.3 exactly 66.667 ms" 'tail -n 1 "$S/out" | grep -qx "makespan: 66.6667 ms"'

"$X" bound --topology dgx-v100 "$P/ex5_3_preamble.xp" > "$S/out" 2>&1
check "bound: Ex. 5.3's preamble, below the paper's 66.7 ms" 'tail -n 1 "$S/out" | awk "\$1 == \"bound:\" && \$2 > 0 && \$2 <= 66.7 { f = 1 } END { exit !f }"'

"$X" baseline ring --topology dgx-v100 --pipe 2 "$P/allreduce8.xp" > "$S/ring.xp" 2> "$S/out"; rc=$?
check "baseline: a pipelined ring all-reduce on dgx-v100" '[ $rc -eq 0 ] && grep -q "^# baseline: ring, pipeline 2" "$S/ring.xp"'
"$X" check "$S/ring.xp" > "$S/out" 2>&1
check "baseline: its output is a valid (chunked) program" '[ $? -eq 0 ] && grep -q "\\[" "$S/ring.xp"'

"$X" baseline spiral --topology dgx-v100 "$P/allreduce8.xp" > "$S/out" 2>&1; rc=$?
check "usage: an unknown baseline exits 2" '[ $rc -eq 2 ]'
