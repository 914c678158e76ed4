# tests/e2e/hf_model.py — a tiny random LLaMA in the Hugging Face layout and
# its logits computed independently in NumPy, for test_hf_model.sh (run with
# Debian's /usr/bin/python3, which has NumPy).
#
#   hf_model.py gen DIR TIED L1,L2,...   DIR/config.json (transformers'
#       LlamaConfig keys), DIR/model.safetensors (transformers' tensor names,
#       projections [out, in]; no lm_head.weight when TIED is 1), DIR/ids.npy
#       (i32 token ids of sequences of lengths L1, L2, ... packed), and the
#       reference logits DIR/ref_all.npy [tokens, vocab] and DIR/ref_last.npy
#       [sequences, vocab] (each sequence's last token)
#   hf_model.py check GOT REF TOL        max |got - ref| / max(1, |ref|) <= TOL
#
# The reference follows transformers' modeling_llama (LlamaModel +
# LlamaForCausalLM) in float64: embedding rows, per layer RMSNorm ->
# q/k/v projections -> rotate-half RoPE at positions 0.. of each sequence ->
# causal GQA attention (repeat_kv, scores / sqrt(head_dim)) -> o_proj ->
# residual -> RMSNorm -> SwiGLU MLP -> residual; final RMSNorm; lm_head
# (or the embedding when tied). Each packed sequence is its own batch row.
import json, struct, sys
import numpy as np


def write(path, tensors):
    """tensors: [(name, float32 array)] as a .safetensors file (the format's
    own description: 8-byte header length, JSON header, data)."""
    header, blobs, off = {}, [], 0
    for name, a in tensors:
        b = np.ascontiguousarray(a, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def random_llama(rng, dm, L, V, FF, H):
    """The tensors [(HF name, float32 array)] of an untied LLaMA with
    d_model dm, L layers, vocab V, d_ff FF and H heads (as many kv heads),
    norms of ones and every matrix Gaussian / sqrt(its input dim), drawn
    from rng in one fixed order (tools/bench-generate.py's bench model,
    bench-serve's checkpoint, test_generate.py's six-layer model)."""
    w = lambda *s: (rng.standard_normal(s, dtype=np.float32) / np.sqrt(s[-1])).astype(np.float32)
    t = [("model.embed_tokens.weight", w(V, dm)), ("lm_head.weight", w(V, dm)),
         ("model.norm.weight", np.ones(dm, np.float32))]
    for l in range(L):
        p = "model.layers.%d." % l
        t += [(p + "input_layernorm.weight", np.ones(dm, np.float32)),
              (p + "post_attention_layernorm.weight", np.ones(dm, np.float32)),
              (p + "self_attn.q_proj.weight", w(dm, dm)), (p + "self_attn.k_proj.weight", w(dm, dm)),
              (p + "self_attn.v_proj.weight", w(dm, dm)), (p + "self_attn.o_proj.weight", w(dm, dm)),
              (p + "mlp.gate_proj.weight", w(FF, dm)), (p + "mlp.up_proj.weight", w(FF, dm)),
              (p + "mlp.down_proj.weight", w(dm, FF))]
    return t


def gen(d, tied, lens):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
           "intermediate_size": 40, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 8, "num_hidden_layers": 2, "vocab_size": 61, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "tie_word_embeddings": bool(tied), "torch_dtype": "float32",
           "max_position_embeddings": 128, "hidden_act": "silu", "rope_scaling": None}
    with open(d + "/config.json", "w") as f:
        json.dump(cfg, f, indent=2)
    rng = np.random.default_rng(23 + tied)
    dm, H, KV, D, FF, V = 32, 4, 2, 8, 40, 61
    w = lambda *s: (rng.standard_normal(s) / np.sqrt(s[-1])).astype(np.float32)
    norm = lambda: (1 + 0.1 * rng.standard_normal(dm)).astype(np.float32)
    t = {"model.embed_tokens.weight": rng.standard_normal((V, dm)).astype(np.float32)}
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        t.update({p + "input_layernorm.weight": norm(), p + "self_attn.q_proj.weight": w(H * D, dm),
                  p + "self_attn.k_proj.weight": w(KV * D, dm),
                  p + "self_attn.v_proj.weight": w(KV * D, dm),
                  p + "self_attn.o_proj.weight": w(dm, H * D),
                  p + "post_attention_layernorm.weight": norm(),
                  p + "mlp.gate_proj.weight": w(FF, dm), p + "mlp.up_proj.weight": w(FF, dm),
                  p + "mlp.down_proj.weight": w(dm, FF)})
    t["model.norm.weight"] = norm()
    if not tied:
        t["lm_head.weight"] = w(V, dm)
    # transformers' files list tensors in no particular order: shuffle them
    names = sorted(t, key=lambda k: rng.random())
    write(d + "/model.safetensors", [(k, t[k]) for k in names])
    ids = rng.integers(0, V, size=sum(lens)).astype(np.int32)
    ids[0], ids[-1] = 0, V - 1          # the first and the last row of the table
    np.save(d + "/ids.npy", ids)

    f = {k: v.astype(np.float64) for k, v in t.items()}
    eps, base = cfg["rms_norm_eps"], cfg["rope_theta"]

    def rmsnorm(h, wt):
        return wt * (h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + eps))

    def rotate_half(v):
        return np.concatenate([-v[..., D // 2:], v[..., : D // 2]], axis=-1)

    inv_freq = 1.0 / (base ** (np.arange(0, D, 2, dtype=np.float64) / D))
    out = []
    for seq_ids in np.split(ids, np.cumsum(lens)[:-1]):
        x = f["model.embed_tokens.weight"][seq_ids]
        S = x.shape[0]
        emb = np.concatenate([np.outer(np.arange(S), inv_freq)] * 2, axis=-1)
        cos, sin = np.cos(emb)[None], np.sin(emb)[None]
        for l in range(cfg["num_hidden_layers"]):
            p = "model.layers.%d." % l
            h = rmsnorm(x, f[p + "input_layernorm.weight"])
            q = (h @ f[p + "self_attn.q_proj.weight"].T).reshape(S, H, D).transpose(1, 0, 2)
            k = (h @ f[p + "self_attn.k_proj.weight"].T).reshape(S, KV, D).transpose(1, 0, 2)
            v = (h @ f[p + "self_attn.v_proj.weight"].T).reshape(S, KV, D).transpose(1, 0, 2)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            k, v = np.repeat(k, H // KV, axis=0), np.repeat(v, H // KV, axis=0)
            s = q @ k.transpose(0, 2, 1) / np.sqrt(D)
            s = s + np.triu(np.full((S, S), -np.inf), 1)
            a = np.exp(s - s.max(-1, keepdims=True))
            a /= a.sum(-1, keepdims=True)
            o = (a @ v).transpose(1, 0, 2).reshape(S, H * D) @ f[p + "self_attn.o_proj.weight"].T
            x = x + o
            g = rmsnorm(x, f[p + "post_attention_layernorm.weight"])
            gate = g @ f[p + "mlp.gate_proj.weight"].T
            x = x + (gate / (1 + np.exp(-gate)) * (g @ f[p + "mlp.up_proj.weight"].T)) \
                @ f[p + "mlp.down_proj.weight"].T
        x = rmsnorm(x, f["model.norm.weight"])
        head = f["model.embed_tokens.weight"] if tied else f["lm_head.weight"]
        out.append(x @ head.T)
    np.save(d + "/ref_all.npy", np.concatenate(out))
    np.save(d + "/ref_last.npy", np.stack([o[-1] for o in out]))


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
    print("max relative error %.3g" % err)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "gen":
        gen(sys.argv[2], int(sys.argv[3]), [int(v) for v in sys.argv[4].split(",")])
    elif sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3], sys.argv[4]))
    else:
        sys.exit("usage: hf_model.py gen DIR TIED L1,L2,... | check GOT REF TOL")
