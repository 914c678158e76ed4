#!/bin/sh
# tests/e2e/test_fuse.sh — kernel fusion at lowering (issue 33;
# coordinator/compile/co_fuse.h): two LLaMA blocks (packed sequences,
# grouped-query attention, SwiGLU) in f32 and bf16 on 1, 2 and 3 CPU
# devices, whose planner splits cut the fused pairs along tokens, run with
# fusion (the default) and with EIN_FUSE=0: the outputs must be the same
# bytes (the fused kernels round what the pair stores between them) and
# finite, and close to an independent NumPy forward pass of the same
# blocks on the inputs the run loaded (--dump-inputs); the fused runs'
# traces hold swiglu and add_rmsnorm kernels and fewer kernels in all, the
# unfused ones none; a malformed EIN_FUSE is refused by name. (TAP)
set -u
B=${EIN_BUILDDIR:-.}
EINRUN="$(cd "$B" && pwd)/einrun"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=/usr/bin/python3
. "$SRC/tests/e2e/lib.sh"
scratch fuse

require_numpy
echo "1..11"

# block N IN OUT: one LLaMA block reading IN, saving nothing
block() {
    cat <<EOB
input attn_norm$1[d_model]
input wq$1[d_model, d_q]
input wk$1[d_model, d_kv]
input wv$1[d_model, d_kv]
input wo$1[d_q, d_model]
input ffn_norm$1[d_model]
input w1_$1[d_model, d_ff]
input w3_$1[d_model, d_ff]
input w2_$1[d_ff, d_model]
xn$1 = rmsnorm($2, attn_norm$1, 1e-5)
q$1 = matmul(xn$1, wq$1)
k$1 = matmul(xn$1, wk$1)
v$1 = matmul(xn$1, wv$1)
qr$1 = rope(q$1, head_dim, 10000)
kr$1 = rope(k$1, head_dim, 10000)
qh$1 = split_heads(qr$1, head_dim)
kh$1 = split_heads(kr$1, head_dim)
vh$1 = split_heads(v$1, head_dim)
att$1 = attention(qh$1, kh$1, vh$1)
am$1 = merge_heads(att$1)
o$1 = matmul(am$1, wo$1)
h$1 = add($2, o$1)
hn$1 = rmsnorm(h$1, ffn_norm$1, 1e-5)
g1_$1 = matmul(hn$1, w1_$1)
g3_$1 = matmul(hn$1, w3_$1)
sg$1 = silu(g1_$1)
ff$1 = mul(sg$1, g3_$1)
f2_$1 = matmul(ff$1, w2_$1)
$3 = add(h$1, f2_$1)
EOB
}
for dt in f32 bf16; do
    {
        echo "dims tokens=48 d_model=64 d_q=64 d_kv=32 d_ff=96 head_dim=16"
        echo "dtype $dt"
        echo "seqs [20, 28]"
        echo "input x[tokens, d_model]"
        block 0 x y0
        block 1 y0 y
        echo "save y"
    } > "$dt.ein"
done

cat > check.py <<'PY'
import json, sys
import numpy as np

def bf16(a):
    """round f32 to bf16 (nearest even) and back, as the kernels store it"""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)

def load(path):
    a = np.load(path)
    if a.dtype == np.dtype("V2"):   # bf16 as raw bits
        a = (a.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float64)

def rope(x, hd, lens, theta=10000.0):
    t, n = x.shape
    pos = np.concatenate([np.arange(l) for l in lens]).astype(np.float64)
    inv = theta ** (-np.arange(0, hd, 2) / hd)
    ang = pos[:, None] * inv[None, :]
    c, s = np.cos(ang), np.sin(ang)
    y = x.reshape(t, n // hd, hd // 2, 2).copy()
    a, b = y[..., 0].copy(), y[..., 1].copy()
    y[..., 0] = a * c[:, None, :] - b * s[:, None, :]
    y[..., 1] = a * s[:, None, :] + b * c[:, None, :]
    return y.reshape(t, n)

def rms(x, w):
    return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-5) * w

def block(d, i, x, lens):
    g = lambda n: load(f"{d}/{n}.npy")
    hd = 16
    xn = rms(x, g(f"attn_norm{i}"))
    q = rope(xn @ g(f"wq{i}"), hd, lens)
    k = rope(xn @ g(f"wk{i}"), hd, lens)
    v = xn @ g(f"wv{i}")
    t = x.shape[0]
    hq, hk = q.shape[1] // hd, k.shape[1] // hd
    start = np.repeat(np.cumsum([0] + lens[:-1]), lens)
    ii, jj = np.arange(t)[:, None], np.arange(t)[None, :]
    vis = (jj <= ii) & (jj >= start[:, None])
    att = np.empty_like(q)
    for h in range(hq):
        kv = h // (hq // hk)
        s = q[:, h * hd:(h + 1) * hd] @ k[:, kv * hd:(kv + 1) * hd].T / np.sqrt(hd)
        s = np.where(vis, s, -np.inf)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        att[:, h * hd:(h + 1) * hd] = (p / p.sum(axis=1, keepdims=True)) @ v[:, kv * hd:(kv + 1) * hd]
    h = x + att @ g(f"wo{i}")
    hn = rms(h, g(f"ffn_norm{i}"))
    a, b = hn @ g(f"w1_{i}"), hn @ g(f"w3_{i}")
    return h + (a / (1 + np.exp(-a)) * b) @ g(f"w2_{i}")

cmd = sys.argv[1]
if cmd == "ref":      # ref INPUTS Y TOL: the two blocks in float64 against Y
    d, y, tol = sys.argv[2], load(sys.argv[3]), float(sys.argv[4])
    lens = [20, 28]
    x = load(f"{d}/x.npy")
    r = block(d, 1, block(d, 0, x, lens), lens)
    err = np.abs(y - r).max() / max(1.0, np.abs(r).max())
    ok = bool(np.isfinite(y).all()) and err <= tol
    print(f"max error {err:.3g} of the largest value (tol {tol})")
    sys.exit(0 if ok else 1)
if cmd == "finite":
    sys.exit(0 if np.isfinite(load(sys.argv[2])).all() else 1)
if cmd == "count":    # count TRACE: kernels, swiglu, add_rmsnorm in a Chrome trace
    # a fused kernel is named after both operators: "sg0+ff0" is silu + mul,
    # "h0+hn0" and "y0+xn1" (between the blocks) add + rmsnorm
    ev = json.load(open(sys.argv[2]))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    ks = [e["name"] for e in ev if e.get("ph") == "X" and e.get("cat") == "kernel"]
    sw = {"kernel sg0+ff0", "kernel sg1+ff1"}
    ar = {"kernel h0+hn0", "kernel y0+xn1", "kernel h1+hn1"}
    print(len(ks), sum(n in sw for n in ks), sum(n in ar for n in ks))
PY

# run TAG DT P [env...]: einrun of DT.ein on P devices, y to TAG.npy, trace to TAG.json
run() {
    tag=$1 dt=$2 p=$3
    shift 3
    env "$@" "$EINRUN" --cpu "$p" -q --output "y=$tag.npy" --trace "$tag.json" \
        --dump-inputs "in-$dt" "$dt.ein" > "$tag.log" 2>&1
}

for dt in f32 bf16; do
    for p in 1 2 3; do
        if run "on-$dt-$p" "$dt" "$p" EIN_FUSE=1 && run "off-$dt-$p" "$dt" "$p" EIN_FUSE=0 &&
           cmp -s "on-$dt-$p.npy" "off-$dt-$p.npy" && "$PY" check.py finite "on-$dt-$p.npy"; then
            ok "$dt on $p device(s): fused and unfused outputs are the same bytes, finite"
        else
            not_ok "$dt on $p device(s): fused and unfused outputs differ or a run failed" \
                "$(tail -3 "on-$dt-$p.log" "off-$dt-$p.log" 2>/dev/null)"
        fi
    done
done

# the NumPy forward pass on the inputs the runs loaded
for dt in f32 bf16; do
    # f32: the error of f32 arithmetic; bf16 rounds every stored value (the
    # reference does not), so its bound only catches gross errors: the
    # same bytes as the unfused run (above) is its real check
    tol=1e-4
    [ "$dt" = bf16 ] && tol=0.2
    if out=$("$PY" check.py ref "in-$dt" "on-$dt-3.npy" "$tol" 2>&1); then
        ok "$dt on 3 devices, fused: equals NumPy ($out)"
    else
        not_ok "$dt on 3 devices, fused: differs from NumPy" "$out"
    fi
done

# kernel counts from the traces: fused runs hold both fused kinds
for p in 1 3; do
    set -- $("$PY" check.py count "on-f32-$p.json") $("$PY" check.py count "off-f32-$p.json")
    # on each device: 2 swiglu and 3 add_rmsnorm, 5 kernels fewer
    if [ $# -eq 6 ] && [ "$2" -eq $((2 * p)) ] && [ "$3" -eq $((3 * p)) ] && [ "$5" -eq 0 ] &&
       [ "$6" -eq 0 ] && [ "$1" -eq $(($4 - 5 * p)) ]; then
        ok "f32 on $p device(s): $1 kernels fused ($2 swiglu, $3 add_rmsnorm), $4 unfused"
    else
        not_ok "f32 on $p device(s): kernel counts fused / unfused: $*"
    fi
done

if EIN_FUSE=yes "$EINRUN" --cpu 1 -q --output "y=bad.npy" f32.ein > bad.log 2>&1; then
    not_ok "EIN_FUSE=yes runs"
elif grep -q "EIN_FUSE" bad.log && [ ! -e bad.npy ]; then
    ok "EIN_FUSE=yes is refused by name"
else
    not_ok "EIN_FUSE=yes: no message naming it" "$(cat bad.log)"
fi
