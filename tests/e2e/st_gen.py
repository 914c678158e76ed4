# tests/e2e/st_gen.py — writes .safetensors test files and checks results
# against NumPy, for test_weights.sh (run with Debian's /usr/bin/python3,
# which has NumPy). The writer is independent of ours (ein_safetensors_write):
# it follows the format description, so a test cannot pass by our writer
# and reader agreeing on a mistake.
#
#   st_gen.py ffn DIR DTYPE        DIR/model.safetensors (x, w1, layers.0.w2,
#                                  pos I64) and DIR/ref.npy = relu(x@w1)@w2
#   st_gen.py bad DIR              DIR/bad-*.safetensors, one lie each
#   st_gen.py rope DIR             DIR/x.npy [12, 4*16] and DIR/ref.npy: Hugging
#                                  Face's rotate-half RoPE of x (theta 500000)
#                                  over packed sequences [5, 7], written the
#                                  way transformers' modeling_llama does it
#   st_gen.py hfllama DIR          DIR/model.safetensors: one decoder layer of a
#                                  tiny LLaMA under transformers' tensor names
#                                  (model.layers.0.self_attn.q_proj.weight, ...,
#                                  [out, in] layout), DIR/x.npy [24, 32] and
#                                  DIR/ref.npy: the layer's output computed as
#                                  modeling_llama.LlamaDecoderLayer does, over
#                                  packed sequences [10, 14]
#   st_gen.py ffnref DIR OUT       OUT = relu(x@w1)@w2 of DIR/{x,w1,w2}.npy
#   st_gen.py check GOT REF TOL    max |got - ref| / max(1, |ref|) <= TOL
import json, struct, sys
import numpy as np


def write(path, tensors, lie=None):
    """tensors: [(name, array, dtype-name)]; lie: edits the header dict."""
    header, blobs, off = {}, [], 0
    for name, a, dt in tensors:
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    if lie:
        lie(header)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def ffn(d, dtype):
    rng = np.random.default_rng(7)
    np_t, st_t = {"f32": (np.float32, "F32"), "f16": (np.float16, "F16")}[dtype]
    x = (rng.standard_normal((37, 24)) * 0.5).astype(np_t)
    w1 = (rng.standard_normal((24, 50)) * 0.3).astype(np_t)
    w2 = (rng.standard_normal((50, 24)) * 0.3).astype(np_t)
    pos = np.arange(5, dtype=np.int64)
    write(d + "/model.safetensors",
          [("pos", pos, "I64"), ("w1", w1, st_t), ("layers.0.w2", w2, st_t), ("x", x, st_t)])
    f = lambda a: a.astype(np.float64)
    np.save(d + "/ref.npy", np.maximum(f(x) @ f(w1), 0) @ f(w2))
    # w1 transposed under the right name (a shape error), and f16 for f32.
    write(d + "/transposed.safetensors", [("w1", np.ascontiguousarray(w1.T), st_t)])
    write(d + "/f16.safetensors", [("w1", w1.astype(np.float16), "F16")])
    write(d + "/i64.safetensors", [("w1", np.zeros((24, 50), np.int64), "I64")])


def bad(d):
    a = np.ones((24, 50), np.float32)
    b = np.ones((50, 24), np.float32)
    good = [("w1", a, "F32"), ("w2", b, "F32")]
    write(d + "/good.safetensors", good)
    np.save(d + "/w1.npy", a)
    data = open(d + "/good.safetensors", "rb").read()
    open(d + "/bad-truncated.safetensors", "wb").write(data[:-100])

    def lie_offsets(h):
        h["w2"]["data_offsets"][1] += 400
    write(d + "/bad-offsets.safetensors", good, lie_offsets)

    def overlap(h):
        h["w2"]["data_offsets"] = [4000, 4000 + 3200]
        h["w1"]["data_offsets"] = [0, 4800]
    write(d + "/bad-overlap.safetensors", [("w1", a, "F32"), ("w2", b[:, :16], "F32")], overlap)

    def dtype(h):
        h["w1"]["dtype"] = "F33"
    write(d + "/bad-dtype.safetensors", good, dtype)


def rope(d):
    rng = np.random.default_rng(3)
    tokens, heads, hd, base = 12, 4, 16, 500000.0
    x = rng.standard_normal((tokens, heads * hd)).astype(np.float32)
    np.save(d + "/x.npy", x)
    # transformers: inv_freq = 1 / base^(arange(0, dim, 2) / dim); emb = cat(freqs, freqs)
    inv_freq = 1.0 / (base ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    pos = np.concatenate([np.arange(5), np.arange(7)]).astype(np.float64)
    freqs = np.outer(pos, inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]

    def rotate_half(v):
        v1, v2 = v[..., : hd // 2], v[..., hd // 2:]
        return np.concatenate([-v2, v1], axis=-1)

    q = x.astype(np.float64).reshape(tokens, heads, hd)
    np.save(d + "/ref.npy", (q * cos + rotate_half(q) * sin).reshape(tokens, heads * hd))


def hfllama(d):
    rng = np.random.default_rng(11)
    T, H, KV, D, FF, base, eps = 24, 4, 2, 8, 40, 10000.0, 1e-5
    dm = H * D
    w = lambda *s: (rng.standard_normal(s) / np.sqrt(s[-1])).astype(np.float32)
    p = "model.layers.0."
    t = {p + "input_layernorm.weight": (1 + 0.1 * rng.standard_normal(dm)).astype(np.float32),
         p + "self_attn.q_proj.weight": w(H * D, dm), p + "self_attn.k_proj.weight": w(KV * D, dm),
         p + "self_attn.v_proj.weight": w(KV * D, dm), p + "self_attn.o_proj.weight": w(dm, H * D),
         p + "post_attention_layernorm.weight": (1 + 0.1 * rng.standard_normal(dm)).astype(np.float32),
         p + "mlp.gate_proj.weight": w(FF, dm), p + "mlp.up_proj.weight": w(FF, dm),
         p + "mlp.down_proj.weight": w(dm, FF)}
    write(d + "/model.safetensors", [(k, v, "F32") for k, v in t.items()])
    x = rng.standard_normal((T, dm)).astype(np.float32)
    np.save(d + "/x.npy", x)
    f = {k: v.astype(np.float64) for k, v in t.items()}

    def rmsnorm(h, wt):
        return wt * (h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + eps))

    def rotate_half(v):
        return np.concatenate([-v[..., D // 2:], v[..., : D // 2]], axis=-1)

    inv_freq = 1.0 / (base ** (np.arange(0, D, 2, dtype=np.float64) / D))
    out = []
    for seq in np.split(x.astype(np.float64), [10]):
        S = seq.shape[0]
        emb = np.concatenate([np.outer(np.arange(S), inv_freq)] * 2, axis=-1)
        cos, sin = np.cos(emb)[None], np.sin(emb)[None]          # [1, S, D]
        h = rmsnorm(seq, f[p + "input_layernorm.weight"])
        q = (h @ f[p + "self_attn.q_proj.weight"].T).reshape(S, H, D).transpose(1, 0, 2)
        k = (h @ f[p + "self_attn.k_proj.weight"].T).reshape(S, KV, D).transpose(1, 0, 2)
        v = (h @ f[p + "self_attn.v_proj.weight"].T).reshape(S, KV, D).transpose(1, 0, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = np.repeat(k, H // KV, axis=0), np.repeat(v, H // KV, axis=0)   # repeat_kv
        s = q @ k.transpose(0, 2, 1) / np.sqrt(D)
        s = s + np.triu(np.full((S, S), -np.inf), 1)
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        o = (a @ v).transpose(1, 0, 2).reshape(S, H * D) @ f[p + "self_attn.o_proj.weight"].T
        h1 = seq + o
        g = rmsnorm(h1, f[p + "post_attention_layernorm.weight"])
        gate = g @ f[p + "mlp.gate_proj.weight"].T
        mlp = (gate / (1 + np.exp(-gate)) * (g @ f[p + "mlp.up_proj.weight"].T)) @ f[p + "mlp.down_proj.weight"].T
        out.append(h1 + mlp)
    np.save(d + "/ref.npy", np.concatenate(out))


def check(got, ref, tol):
    g = np.load(got).astype(np.float64)
    r = np.load(ref)
    if g.shape != r.shape:
        print("shape %s, expected %s" % (g.shape, r.shape))
        return 1
    err = float(np.max(np.abs(g - r) / np.maximum(1.0, np.abs(r))))
    if not err <= float(tol):   # NaN fails
        print("max relative error %g over %s" % (err, tol))
        return 1
    return 0


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "ffn":
        ffn(sys.argv[2], sys.argv[3])
    elif cmd == "ffnref":
        ld = lambda n: np.load(sys.argv[2] + "/" + n + ".npy").astype(np.float64)
        np.save(sys.argv[3], np.maximum(ld("x") @ ld("w1"), 0) @ ld("w2"))
    elif cmd == "hfllama":
        hfllama(sys.argv[2])
    elif cmd == "rope":
        rope(sys.argv[2])
    elif cmd == "bad":
        bad(sys.argv[2])
    elif cmd == "check":
        sys.exit(check(sys.argv[2], sys.argv[3], sys.argv[4]))
