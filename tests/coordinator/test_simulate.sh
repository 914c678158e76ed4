#!/bin/sh
# tests/coordinator/test_simulate.sh — einplan --simulate, --objective,
# --strategy and their errors from the command line (TAP). Needs the built
# einplan, eingen, einrun and einworker in the build directory; /usr/bin/python3 checks JSON
# where present.
src=${EIN_SRCDIR:-..}
EINPLAN=./einplan
EINGEN=./eingen
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
. "$src/tests/tap.sh" # ok, not_ok, check
PY=/usr/bin/python3
echo "1..14"
$EINGEN llama --seqs 8 --tokens 8192 > "$tmp/l8.ein"
$EINGEN llama --seqs 1 --tokens 1024 > "$tmp/l1.ein"
check "text report: time, devices, critical path" sh -c "$EINPLAN --devices 8 --simulate --topology dgx-a100 $tmp/l8.ein > $tmp/t && grep -q '^predicted iteration on dgx-a100 (calibration a100): ' $tmp/t && grep -q '^7 ' $tmp/t && grep -q '^critical path: ' $tmp/t && grep -q 'memory per device: 40.00 GB' $tmp/t"
check "json and trace parse; trace has every device" sh -c "$EINPLAN --devices 4 --simulate --json --trace $tmp/tr.json $src/examples/ffn.ein > $tmp/j && { test ! -x $PY || $PY -c 'import json; d=json.load(open(\"$tmp/j\")); t=json.load(open(\"$tmp/tr.json\")); assert d[\"time_s\"] > 0 and len(d[\"devices\"]) == 4 and d[\"critical_path\"][\"steps\"]; assert sorted(set(e[\"pid\"] for e in t)) == [0, 1, 2, 3] and all(e[\"ph\"] == \"X\" for e in t)'; }"
check "the same plan predicts the same time" sh -c "$EINPLAN --devices 4 --simulate --json $src/examples/chain_b.ein > $tmp/a && $EINPLAN --devices 4 --simulate --json $src/examples/chain_b.ein > $tmp/b && cmp -s $tmp/a $tmp/b"
check "--objective time plans and simulates" sh -c "$EINPLAN --devices 8 --objective time --topology dgx-h100 --simulate $tmp/l8.ein | grep -q 'predicted iteration'"
check "each strategy plans LLaMA 8x1K" sh -c "for s in megatron ulysses sequence data; do $EINPLAN --devices 8 --strategy \$s --topology dgx-a100 --simulate $tmp/l8.ein | grep -q 'predicted iteration' || exit 1; done"
check "megatron splits attention by heads, w2 by d_ff" sh -c "$EINPLAN --devices 8 --strategy megatron $tmp/l8.ein > $tmp/m && grep -q '^att .*heads_kv:8 tokens:1' $tmp/m && grep -q '^f2 .*d_ff:8 .*agg sum' $tmp/m"
check "data on one sequence exits 2 naming attention" sh -c "$EINPLAN --devices 8 --strategy data $tmp/l1.ein 2> $tmp/e; test \$? -eq 2 && grep -q 'strategy data: attention att' $tmp/e"
check "too little memory exits 2 naming device, peak, capacity" sh -c "printf 'name tiny\ngpus 8\nhbm 1 TB/s\nport 100 GB/s\nrest direct\nmemory 1 MB\ncalibration h100\n' > $tmp/tiny.topo; $EINPLAN --devices 8 --simulate --topology $tmp/tiny.topo $tmp/l8.ein 2> $tmp/e; test \$? -eq 2 && grep -q 'no plan fits: device [0-9]*: predicted peak memory .* exceeds its capacity 1.00 MB' $tmp/e && grep -q 'largest tensors alive' $tmp/e"
check "bad --objective, --strategy, --calibration exit 2" sh -c "$EINPLAN --devices 2 --objective fast $src/examples/ffn.ein 2>/dev/null; test \$? -eq 2 || exit 1; $EINPLAN --devices 2 --strategy zero $src/examples/ffn.ein 2>/dev/null; test \$? -eq 2 || exit 1; $EINPLAN --devices 2 --simulate --calibration $tmp/none.cal $src/examples/ffn.ein 2> $tmp/e; test \$? -eq 2 && grep -q 'none.cal' $tmp/e"
check "--trace without --simulate exits 2" sh -c "$EINPLAN --devices 2 --trace $tmp/x.json $src/examples/ffn.ein 2> $tmp/e; test \$? -eq 2 && grep -q 'need --simulate' $tmp/e"
check "topology with fewer GPUs than devices exits 2" sh -c "$EINPLAN --devices 16 --simulate --topology dgx-a100 $src/examples/ffn.ein 2> $tmp/e; test \$? -eq 2 && grep -q 'has 8 GPUs but the [a-z]* has 16 devices' $tmp/e"
check "a calibration file is used" sh -c "printf 'name slow\noverhead 0 us\nlatency 0 us\niteration 1 s\n' > $tmp/slow.cal; $EINPLAN --devices 2 --simulate --calibration $tmp/slow.cal $src/examples/ffn.ein | grep -q '(calibration slow): [0-9.]* ms (makespan [0-9.]* ms + 1000.000 ms per iteration)'"
# einrun --calibrate on 2 CPU devices: a table einplan reads back, with
# every figure the simulator uses (the busy ones from the ring run), each
# a positive time, and efficiency points for every kind of work.
check "einrun --calibrate writes a complete table" sh -c "./einrun --cpu 2 --calibrate --out $tmp/m.cal && for k in overhead latency iteration latency-busy notify-busy; do grep -q \"^\$k [0-9.e+-]* us\$\" $tmp/m.cal || { echo \"no \$k\"; exit 1; }; done && for w in gemm attention elementwise copy unary layout; do grep -q \"^eff \$w \" $tmp/m.cal || { echo \"no eff \$w\"; exit 1; }; done && grep -q '^cores [1-9]' $tmp/m.cal && $EINPLAN --devices 4 --simulate --calibration $tmp/m.cal $src/examples/ffn.ein | grep -q 'predicted iteration'"
check "einrun --calibrate --out into a missing directory exits 2" sh -c "./einrun --cpu 2 --calibrate --out $tmp/no/such/m.cal 2> $tmp/e; test \$? -eq 2 && grep -q 'cannot write' $tmp/e"
test $fails -eq 0
