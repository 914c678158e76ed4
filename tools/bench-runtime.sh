#!/bin/sh
# tools/bench-runtime.sh — the runtime's benchmarks on CPU devices:
#   1. peer-copy bandwidth between two worker processes vs memcpy;
#   2. per-instruction dispatch overhead (a chain of tiny operators), one
#      instruction at a time and replayed from graphs;
#   3. the FFN (tokens 4096, d_model 1024, d_ff 4096) on --gpus 0-1 vs --gpus 0.
# Run from the build directory: sh ../tools/bench-runtime.sh (or with B=dir).
set -eu
B=$(cd "${B:-.}" && pwd)  # absolute: the runs below cd elsewhere
S=$(mktemp -d "${TMPDIR:-/tmp}/ein-bench.XXXXXX")
trap 'rm -rf "$S"' EXIT
echo "== peer copy"
"$B/tools/bench-copy" 256 10

echo "== dispatch overhead"
n=2000
{
    echo "input x0[4, 8]"
    i=1
    while [ $i -le $n ]; do echo "x$i = relu(x$((i - 1)))"; i=$((i + 1)); done
    echo "save x$n"
} > "$S/chain.ein"
out=$(cd "$S" && "$B/einrun" --cpu 1 --iterations 5 --warmup 1 chain.ein 2>/dev/null)
med=$(echo "$out" | sed -n 's/.*median \([0-9.]*\) ms.*/\1/p')
echo "$n kernel instructions: median iteration $med ms, $(echo "scale=2; $med * 1000 / $n" | bc) us per instruction"
# The same chain replayed from graphs (on CPU devices a recording of the
# kernel calls: what is saved is the executor's own dispatch).
out=$(cd "$S" && "$B/einrun" --cpu 1 --iterations 5 --warmup 1 --graphs on chain.ein 2>/dev/null)
gmed=$(echo "$out" | sed -n 's/.*median \([0-9.]*\) ms.*/\1/p')
echo "  with --graphs on: median iteration $gmed ms, $(echo "scale=2; $gmed * 1000 / $n" | bc) us per instruction"

echo "== FFN tokens=4096 d_model=1024 d_ff=4096"
sed -e 's/tokens=8192 d_model=4096 d_ff=14336/tokens=4096 d_model=1024 d_ff=4096/' \
    "$(dirname "$0")/../examples/ffn.ein" > "$S/ffn.ein"
one=$(cd "$S" && "$B/einrun" --gpus 0 --iterations 5 --warmup 1 ffn.ein 2>/dev/null | sed -n 's/.*median \([0-9.]*\) ms.*/\1/p')
two=$(cd "$S" && "$B/einrun" --gpus 0-1 --iterations 5 --warmup 1 ffn.ein 2>/dev/null | sed -n 's/.*median \([0-9.]*\) ms.*/\1/p')
echo "--gpus 0: median $one ms; --gpus 0-1: median $two ms; speed-up $(echo "scale=2; $one / $two" | bc)x (target >= 1.6x on 2 cores)"
