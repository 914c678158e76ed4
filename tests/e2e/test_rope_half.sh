#!/bin/sh
# tests/e2e/test_rope_half.sh — rope(x, D, theta, style=half) against a NumPy
# rotate-half reference written as Hugging Face's modeling_llama computes it
# (tests/e2e/st_gen.py rope), over packed sequences, on 1, 2 and 3 CPU
# devices; the interleaved default differs from it; bad style arguments
# are parse errors naming the position. Then docs/hf-llama.md end to end: a
# tiny LLaMA decoder layer saved under transformers' names and layout, run
# from `eingen llama --hf` with the --map lines eingen prints, equals the
# layer computed as modeling_llama does (TAP).
set -u
B=${EIN_BUILDDIR:-.}
EINRUN="$(cd "$B" && pwd)/einrun"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=/usr/bin/python3
GEN="$SRC/tests/e2e/st_gen.py"
. "$SRC/tests/e2e/lib.sh"
scratch rope

require_numpy
echo "1..9"
"$PY" "$GEN" rope . || exit 1
cat > half.ein <<'EIN'
dims tokens=12 hidden=64
seqs [5, 7]
input x[tokens, hidden]
y = rope(x, 16, 500000, style=half)
save y
EIN
sed 's/, style=half//' half.ein > inter.ein

for nd in 1 2 3; do
    rm -f y.npy
    if "$EINRUN" --cpu $nd --input x=x.npy half.ein > out.txt 2>&1 &&
            msg=$("$PY" "$GEN" check y.npy ref.npy 1e-5); then
        ok "style=half on $nd devices matches the rotate-half reference"
    else
        not_ok "style=half on $nd devices matches the rotate-half reference" "$(cat out.txt)" "${msg:-}"
    fi
done
rm -f y.npy
"$EINRUN" --cpu 2 --input x=x.npy inter.ein > out.txt 2>&1
if ! "$PY" "$GEN" check y.npy ref.npy 1e-3 > /dev/null 2>&1 && [ -f y.npy ]; then
    ok "the interleaved default is not rotate-half"
else
    not_ok "the interleaved default is not rotate-half" "$(cat out.txt)"
fi

# parse_err NAME LINE PATTERN
parse_err() {
    printf 'dims t=4 h=8\ninput x[t, h]\n%s\nsave y\n' "$2" > bad.ein
    "$EINRUN" --cpu 1 bad.ein > out.txt 2>&1
    rc=$?
    if [ $rc -eq 2 ] && grep -q -- "$3" out.txt && [ "$(out_lines out.txt)" -eq 1 ]; then
        ok "$1"
    else
        not_ok "$1" "exit $rc: $(cat out.txt)"
    fi
}
parse_err "an unknown style" "y = rope(x, 4, style=full)" "bad.ein:3:22: rope style 'full'; expected half or interleaved"
parse_err "style on another operator" "y = relu(x, style=half)" "bad.ein:3:13: relu takes no keyword argument 'style'"
parse_err "a positional argument after style" "y = rope(x, style=half, 4)" "bad.ein:3:25: a positional argument after style="

# The Hugging Face layer, bound by the --map lines eingen writes in its header.
mkdir hf
"$PY" "$GEN" hfllama hf || exit 1
"$(cd "$B" && pwd)/eingen" llama --seqs 2 --tokens 24 --heads 4 --kv-heads 2 --head-dim 8 \
    --d-ff 40 --theta 10000 --dtype f32 --hf > hf.ein || exit 1
sed 's/seqs \[12, 12\]/seqs [10, 14]/' hf.ein > hf2.ein
maps=$(sed -n "s/^#   --map '\(.*\)=model.layers.b.\(.*\)'$/--map \1=model.layers.0.\2/p" hf2.ein)
for nd in 1 3; do
    rm -f y.npy
    # shellcheck disable=SC2086
    if [ -n "$maps" ] && "$EINRUN" --cpu $nd --weights hf/model.safetensors $maps --input x=hf/x.npy \
            hf2.ein > out.txt 2>&1 && msg=$("$PY" "$GEN" check y.npy hf/ref.npy 1e-4); then
        ok "a Hugging Face LLaMA layer from its checkpoint names on $nd devices matches modeling_llama"
    else
        not_ok "a Hugging Face LLaMA layer from its checkpoint names on $nd devices matches modeling_llama" \
            "$(cat out.txt)" "${msg:-}" "maps: $maps"
    fi
done
