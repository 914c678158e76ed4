#!/bin/sh
# tests/planner/test_memory_limit.sh — --memory-limit in einplan and einrun
# (issue 24, TAP). A 4-block LLaMA on 2 host devices: the default plan keeps
# every weight on both devices (peak about 22 MB); under a 17 MB limit the
# search must return a plan whose whole-graph peak fits (the prefix of two
# blocks it searches first fits either way), below what any plan needs it
# must fail naming the capacity, and bad sizes are refused.
EINPLAN=./einplan
EINGEN=./eingen
EINRUN=./einrun
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
. "${EIN_SRCDIR:-..}/tests/tap.sh" # ok, not_ok, check
# peak MB of `einplan --simulate` output in file $1 ("largest peak X MB")
peak() { sed -n 's/^memory reuse: largest peak \([0-9.]*\) MB.*/\1/p' "$1"; }
echo "1..7"
$EINGEN llama --blocks 4 --seqs 1 --tokens 256 --heads 4 --kv-heads 4 --head-dim 64 \
    --d-ff 1024 --dtype f32 > "$tmp/m.ein" || exit 1

# On dgx-a100 (GPU figures: a GEMM priced by its FLOPs) the fastest plan
# splits by tokens and keeps every weight on both devices (20.9 MB); on
# the host topology the calibration's gemm-operands already make the
# weight split (the smallest plan, 15.6 MB) the fastest, so no limit
# between them would bind there.
T="--topology dgx-a100"
check "default plan needs more than 17 MB (the limit binds)" sh -c "
    $EINPLAN --devices 2 $T --simulate $tmp/m.ein > $tmp/d.txt &&
    p=\$(sed -n 's/^memory reuse: largest peak \([0-9.]*\) MB.*/\1/p' $tmp/d.txt) &&
    test -n \"\$p\" && awk -v p=\"\$p\" 'BEGIN { exit !(p > 17.0) }'"
check "under 17MB the whole graph is searched and its peak fits" sh -c "
    $EINPLAN --devices 2 $T --simulate --memory-limit 17MB $tmp/m.ein > $tmp/l.txt &&
    grep -q 'searched the whole graph' $tmp/l.txt &&
    grep -q '^memory per device: 17.00 MB' $tmp/l.txt &&
    p=\$(sed -n 's/^memory reuse: largest peak \([0-9.]*\) MB.*/\1/p' $tmp/l.txt) &&
    test -n \"\$p\" && awk -v p=\"\$p\" 'BEGIN { exit !(p <= 17.0) }'"
check "a size in bytes is the same limit" sh -c "
    $EINPLAN --devices 2 $T --simulate --memory-limit 17000000 $tmp/m.ein > $tmp/b.txt &&
    cmp -s $tmp/l.txt $tmp/b.txt"
check "a limit no plan fits: exit 2 naming the capacity" sh -c "
    $EINPLAN --devices 2 --simulate --memory-limit 8MB $tmp/m.ein 2> $tmp/e;
    test \$? -eq 2 && grep -q 'no plan fits' $tmp/e && grep -q 'capacity 8.00 MB' $tmp/e"
check "bad sizes exit 2 with the text" sh -c "
    for v in 0 -5GB abc 5XB; do
        $EINPLAN --devices 2 --simulate --memory-limit \"\$v\" $tmp/m.ein 2> $tmp/e;
        test \$? -eq 2 && grep -q \"memory limit '\$v'\" $tmp/e || exit 1;
    done"
check "einrun refuses a bad size" sh -c "
    $EINRUN --cpu 2 --memory-limit 5XB $tmp/m.ein 2> $tmp/e;
    test \$? -eq 2 && grep -q \"memory limit '5XB': unknown unit\" $tmp/e"
# The library's compile (einrun --explain prints its plan): the limit
# splits the weights of the MLP's projections where the default splits
# tokens (the attention's projections split their weights either way,
# reading a replicated rmsnorm).
check "einrun's compile takes the limit" sh -c "
    $EINRUN --cpu 2 -q --explain $T $tmp/m.ein > $tmp/x0 2>&1 &&
    $EINRUN --cpu 2 -q --explain $T --memory-limit 17MB $tmp/m.ein > $tmp/x1 2>&1 &&
    $EINPLAN --devices 2 $T --memory-limit 17MB $tmp/m.ein > $tmp/p1 2>&1 &&
    s=\$(sed -n 's/^  g1_0  *\(tokens:[0-9]* d_model:[0-9]* d_ff:[0-9]*\) .*/\1/p' $tmp/x1) &&
    test -n \"\$s\" && ! grep -q \"^  g1_0  *\$s \" $tmp/x0 &&
    grep -q \"^g1_0  *matmul  *\$s \" $tmp/p1"
exit $((fails > 0))
