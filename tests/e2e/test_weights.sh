#!/bin/sh
# tests/e2e/test_weights.sh — inputs from .safetensors files: the FFN with
# its weights (and x) read from a file, by name and through --map, on 1-3
# CPU devices, f32 and f16, against NumPy; and every bad file (truncated,
# offsets that lie, overlapping ranges, unknown dtype, a bound tensor of the
# wrong dtype or shape, a map to nothing) refused with one line naming the
# file and the tensor, exit 2, before any worker starts (TAP).
set -u
B=${EIN_BUILDDIR:-.}
EINRUN="$(cd "$B" && pwd)/einrun"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=/usr/bin/python3
GEN="$SRC/tests/e2e/st_gen.py"
. "$SRC/tests/e2e/lib.sh"
scratch weights

require_numpy
echo "1..18"
write_ffn ffn.ein
sed 's/^input/dtype f16\ninput/' ffn.ein | awk '!(/^dtype f16$/ && seen++)' > ffn16.ein
mkdir f32 f16
"$PY" "$GEN" ffn f32 f32 && "$PY" "$GEN" ffn f16 f16 && "$PY" "$GEN" bad . || exit 1
# A worker that leaves a mark: nothing may start when a file is bad.
printf '#!/bin/sh\ntouch "%s/started"\nexit 1\n' "$S" > mark.sh
chmod +x mark.sh

for spec in "f32 ffn.ein 1 1e-5" "f32 ffn.ein 3 1e-5" "f16 ffn16.ein 2 2e-2"; do
    set -- $spec
    rm -f y.npy
    if "$EINRUN" --cpu "$3" --weights "$1/model.safetensors" --map w2=layers.0.w2 \
            --allow-unused-weights "$2" \
            > out.txt 2>&1 && msg=$("$PY" "$GEN" check y.npy "$1/ref.npy" "$4"); then
        ok "$1 FFN from a safetensors file on $3 devices matches NumPy"
    else
        not_ok "$1 FFN from a safetensors file on $3 devices matches NumPy" "$(cat out.txt)" "${msg:-}"
    fi
done

# bad NAME STATUS PATTERN einrun-args...: exit STATUS, one line matching
# PATTERN, and no worker started.
bad() {
    name=$1 want=$2 pat=$3
    shift 3
    rm -f started
    "$EINRUN" --cpu 2 --worker "$S/mark.sh" "$@" ffn.ein > out.txt 2>&1
    rc=$?
    if [ $rc -ne "$want" ]; then
        not_ok "$name" "exit status $rc, expected $want" "$(cat out.txt)"
    elif ! grep -q -- "$pat" out.txt; then
        not_ok "$name" "message does not match '$pat'" "$(cat out.txt)"
    elif [ "$(out_lines out.txt)" -ne 1 ]; then
        not_ok "$name" "error is not one line" "$(cat out.txt)"
    elif [ -e started ]; then
        not_ok "$name" "a worker started"
    else
        ok "$name"
    fi
}
bad "truncated file" 2 "bad-truncated.safetensors: tensor 'w2': .*truncated" \
    --weights bad-truncated.safetensors
bad "header lying about offsets" 2 "bad-offsets.safetensors: tensor 'w2': data_offsets .* reach past" \
    --weights bad-offsets.safetensors
bad "overlapping ranges" 2 "bad-overlap.safetensors: tensor 'w2': .* overlap tensor 'w1'" \
    --weights bad-overlap.safetensors
bad "unknown dtype" 2 "bad-dtype.safetensors: tensor 'w1': unknown dtype 'F33'" \
    --weights bad-dtype.safetensors
bad "tensor of the wrong shape" 2 "f32/transposed.safetensors: tensor 'w1' is F32 \[50, 24\] but input w1 is f32 \[24, 50\]" \
    --weights f32/transposed.safetensors
bad "tensor of the wrong dtype" 2 "f32/f16.safetensors: tensor 'w1' is F16 \[24, 50\] but input w1 is f32" \
    --weights f32/f16.safetensors
bad "a dtype we do not compute in" 2 "f32/i64.safetensors: tensor 'w1' is I64" \
    --weights f32/i64.safetensors
bad "a mapped tensor of the wrong shape" 2 "tensor 'w2' is F32 \[50, 24\] but input w1" \
    --weights good.safetensors --map w1=w2
bad "--map to a missing tensor" 2 "no tensor named 'nope' in good.safetensors" \
    --weights good.safetensors --map w1=nope
bad "--map to a missing input" 2 "the program has no input named 'wz'" \
    --weights good.safetensors --map wz=w1
bad "--map without --weights" 2 "no weights file" --map w1=w1
# A tensor of the file that nothing binds (the I64 'pos' buffer): refused by
# name unless --allow-unused-weights (the runs above).
bad "an unused tensor of the file is refused by name" 2 \
    "f32/model.safetensors: tensor 'pos' is bound to no input of the program (1 unused: pos).*--allow-unused-weights" \
    --weights f32/model.safetensors --map w2=layers.0.w2
bad "--weights of a directory" 2 "$S: " --weights "$S"
# --input wins over a same-named tensor; --map of it is refused.
bad "--map of an input given by --input" 2 "input w1 already has a source" \
    --weights good.safetensors --input w1=w1.npy --map w1=w2
# A good file binds and the run reaches the workers (which mark.sh fails).
rm -f started
"$EINRUN" --cpu 2 --worker "$S/mark.sh" --weights good.safetensors --generate-missing ffn.ein > out.txt 2>&1
if [ -e started ]; then ok "a good file gets to the workers"; else not_ok "a good file gets to the workers" "$(cat out.txt)"; fi
