#!/bin/sh
# tests/e2e/test_einrun_errors.sh — bad input and failing workers: each run
# must end with a one-line clear error, the right exit status, no output file
# (not even half-written) and nothing left behind (TAP).
set -u
B=${EIN_BUILDDIR:-.}
EINRUN="$B/einrun"
NPY="$B/tests/e2e/npytool"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/e2e/lib.sh"
scratch err

write_ffn ffn.ein
"$B/eingen" llama --seqs 2 --tokens 16 --scale 0.0625 --dtype f32 > llama.ein 2> gen.txt ||
    { cat gen.txt; exit 1; }
printf 'dims a=4\ninput x[a, a]\ny = matmull(x, x)\nsave y\n' > bad.ein
printf 'dims a=1\ninput x[a, a]\ny = matmul(x, x)\nsave y\n' > tiny.ein
"$NPY" write x_ok.npy f32 1 37 24 || exit 1
"$NPY" write x_shape.npy f32 1 3 4 || exit 1
"$NPY" write x_f16.npy f16 1 37 24 || exit 1
printf 'this is not a npy file at all, just text\n' > garbage.npy
head -c 100 x_ok.npy > truncated.npy
printf '#!/bin/sh\nkill -9 $$\n' > crash.sh
printf '#!/bin/sh\nexec sleep 30\n' > hang.sh
chmod +x crash.sh hang.sh

# expect NAME STATUS PATTERN -- einrun args...
expect() {
    name=$1; want=$2; pat=$3; shift 4
    rm -f y.npy
    "$EINRUN" "$@" > out.txt 2>&1 &
    pid=$!
    wait $pid
    rc=$?
    left=$(leftovers $pid)
    lines=$(out_lines out.txt)
    if [ "$rc" -ne "$want" ]; then
        not_ok "$name" "exit status $rc, expected $want" "$(cat out.txt)"
    elif ! grep -q -- "$pat" out.txt; then
        not_ok "$name" "message does not match '$pat':" "$(cat out.txt)"
    elif [ "$want" -ne 0 ] && [ -e y.npy ]; then
        not_ok "$name" "a failed run left y.npy"
    elif [ -n "$left" ]; then
        not_ok "$name" "left behind:$left"
    elif [ "$want" -ne 0 ] && [ "$lines" -gt 2 ]; then
        not_ok "$name" "error is $lines lines, expected one" "$(cat out.txt)"
    else
        ok "$name"
    fi
}

echo "1..35"
expect "help"                 0 "usage: einrun"                     -- --help
expect "no program"           2 "no program given"                  --
expect "missing program"      2 "nosuch.ein"                        -- --cpu 2 nosuch.ein
expect "parse error position" 2 "bad.ein:3:5: unknown operator"     -- --cpu 2 bad.ein
expect "gpus open range"      2 "--gpus '0-': expected a device list" -- --gpus 0- ffn.ein
expect "gpus letters"         2 "--gpus 'x': expected a device list" -- --gpus x ffn.ein
expect "gpus reversed"        2 "--gpus '3-1': expected"            -- --gpus 3-1 ffn.ein
expect "gpus empty item"      2 "--gpus '0,,1': expected"           -- --gpus 0,,1 ffn.ein
expect "gpus too many"        2 "at most 64 devices"                -- --gpus 0-99 ffn.ein
expect "unknown strategy"     2 "strategy 'bogus': expected megatron, ulysses, sequence or data" -- --cpu 2 --strategy bogus ffn.ein
expect "strategy that does not apply" 2 "strategy data: attention .* has 2 sequences, fewer than the 4 devices" -- --cpu 4 --strategy data llama.ein
expect "cpu zero"             2 "--cpu '0': expected a device count" -- --cpu 0 ffn.ein
# 2^32 + 2 once wrapped to 2 devices when narrowed to int before the range check
expect "cpu past int"         2 "--cpu '4294967298': expected a device count" -- --cpu 4294967298 ffn.ein
expect "missing input file"   2 "missing.npy"                       -- --cpu 2 --input x=missing.npy ffn.ein
expect "garbage npy"          2 "garbage.npy"                       -- --cpu 2 --input x=garbage.npy ffn.ein
expect "truncated npy"        2 "truncated.npy"                     -- --cpu 2 --input x=truncated.npy ffn.ein
expect "wrong shape"          2 "x_shape.npy is f32 \[3, 4\] but input x is f32 \[37, 24\]" -- --cpu 2 --input x=x_shape.npy ffn.ein
expect "wrong dtype"          2 "x_f16.npy is f16 \[37, 24\] but input x is f32" -- --cpu 2 --input x=x_f16.npy ffn.ein
expect "unknown input"        2 "no input named 'q'"                -- --cpu 2 --input q=x_ok.npy ffn.ein
expect "input not an input"   2 "no input named 'act'"              -- --cpu 2 --input act=x_ok.npy ffn.ein
expect "binding without ="    2 "expected NAME=FILE.npy"            -- --cpu 2 --input x ffn.ein
expect "unknown output"       2 "saves no tensor named 'z'"         -- --cpu 2 --output z=z.npy ffn.ein
expect "bad selector"         2 "expected dp, greedy or random"     -- --cpu 2 --selector best ffn.ein
expect "unwritable output"    2 "cannot write nodir/y.npy"          -- --cpu 2 --output y=nodir/y.npy ffn.ein
expect "cuda backend, no GPU"  2 "einrun: --backend cuda: "        -- --gpus 0-1 --backend cuda ffn.ein
expect "bad backend"          2 "--backend 'tpu': expected cpu or cuda" -- --gpus 0 --backend tpu ffn.ein
EIN_EXCHANGE_CHUNKS=bogus expect "bad exchange chunks" 2 "EIN_EXCHANGE_CHUNKS: 'bogus': expected auto, off or a chunk count" -- --cpu 2 ffn.ein
expect "bad --exchange-chunks" 2 "--exchange-chunks '0': expected auto, off or a chunk count" -- --cpu 2 --exchange-chunks 0 ffn.ein
expect "--exchange-chunks 4"  0 "saved y \[37, 24\] f32 to y.npy"    -- --cpu 3 --exchange-chunks 4 ffn.ein
expect "1x1 on 4 devices"     0 "saved y \[1, 1\] f32 to y.npy (blocks written by device 0)" -- --cpu 4 tiny.ein
expect "worker cannot start"  1 "device [0-9] (pid [0-9]*) exited with status 1 at startup" -- --cpu 3 --worker /bin/false ffn.ein
expect "worker crashes"       1 "device [0-9] (pid [0-9]*) was killed by signal 9" -- --cpu 3 --worker ./crash.sh ffn.ein
start=$(date +%s)
expect "worker hangs"         1 "device [0-9] (pid [0-9]*) sent no heartbeat for" -- --cpu 2 --worker-timeout 1 --worker ./hang.sh ffn.ein
took=$(( $(date +%s) - start ))
# The worker sleeps 30 s: detection well before that is the heartbeat (a
# loaded 2-core machine needs a wide margin over the 1 s timeout).
if [ "$took" -le 25 ]; then ok "hang detected in ${took}s (<= 25)"; else not_ok "hang detected in ${took}s, expected <= 25"; fi
expect "success with file"    0 "saved y \[37, 24\] f32 to y.npy"    -- --cpu 3 --input x=x_ok.npy --generate-missing ffn.ein
[ "$n" -eq 33 ] || echo "# planned 33 tests but ran $n"
exit 0
