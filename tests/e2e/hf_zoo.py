# tests/e2e/hf_zoo.py — a zoo of tiny random checkpoints in the Hugging Face
# layout (issue 34), each with its logits computed independently in NumPy
# from transformers' semantics, for test_hf_zoo.sh (the command line) and
# tests/python/test_zoo.py (es.llama). Run with Debian's /usr/bin/python3.
#
#   hf_zoo.py list                 the model names, one a line
#   hf_zoo.py gen NAME DIR L1,...  DIR/config.json, DIR/model.safetensors,
#       DIR/ids.npy (i32 ids of packed sequences of lengths L1, ...),
#       DIR/ref_last.npy [sequences, vocab] (each sequence's last token),
#       DIR/ref_all.npy [tokens, vocab], DIR/lens
#   hf_zoo.py refused              NAME<TAB>config JSON<TAB>words the refusal
#       must contain, one a line: configs both paths must refuse by name
#   hf_zoo.py check GOT REF TOL    max |got - ref| / max(1, |ref|) <= TOL
#   hf_zoo.py greedy NAME DIR N    N greedy new ids of each sequence of DIR
#       (transformers' loop: the whole sequence again for each token)
#
# The reference is written from transformers' modeling code, not from this
# project's: LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM in
# float64: embedding rows; per layer RMSNorm (x / sqrt(mean(x^2) + eps) * w)
# -> q/k/v projections (+ biases: Llama's attention_bias on q, k, v and o;
# Qwen2's on q, k, v only) -> RoPE with rotate_half at positions 0.. of each
# sequence, inv_freq = 1 / theta^(2i/head_dim) rescaled by rope_scaling
# (linear: / factor; llama3: _compute_llama3_parameters) -> causal GQA
# attention (repeat_kv, scores * head_dim^-0.5; a sliding window W masks
# key j for query i when i - j >= W) -> o_proj -> residual -> RMSNorm ->
# down(act(gate(x)) * up(x)) (+ mlp_bias) with ACT2FN's
# activation -> residual; final RMSNorm; lm_head or the tied embedding.
import json, math, sys
import numpy as np

from hf_model import check, write  # the safetensors writer and the error check, shared

BASE = {"hidden_size": 32, "intermediate_size": 40, "num_attention_heads": 4,
        "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 61,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
        "torch_dtype": "float32", "max_position_embeddings": 128, "hidden_act": "silu",
        "transformers_version": "4.45.0", "bos_token_id": 1, "eos_token_id": 2,
        "use_cache": True, "initializer_range": 0.02}

ZOO = {
    # LLaMA 2: no head_dim key, theta 10000, pretraining_tp 1, no biases
    "llama2": dict(BASE, model_type="llama", architectures=["LlamaForCausalLM"],
                   pretraining_tp=1, attention_bias=False, mlp_bias=False, rope_scaling=None,
                   attention_dropout=0.0),
    # Llama 3.1: llama3 rope scaling (original context 16 so that the tiny
    # model's frequencies fall in all three bands), theta 500000
    "llama31": dict(BASE, model_type="llama", architectures=["LlamaForCausalLM"],
                    rope_theta=500000.0, eos_token_id=[2, 3],
                    rope_scaling={"factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0,
                                  "original_max_position_embeddings": 16,
                                  "rope_type": "llama3"}),
    # Llama 3.2: tied embeddings, llama3 scaling, explicit head_dim
    "llama32": dict(BASE, model_type="llama", architectures=["LlamaForCausalLM"],
                    tie_word_embeddings=True, head_dim=8, rope_theta=500000.0,
                    rope_scaling={"factor": 32.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0,
                                  "original_max_position_embeddings": 32,
                                  "rope_type": "llama3"}),
    # linear rope scaling (the older "type" key), attention and MLP biases
    # and exact gelu
    "linear_bias": dict(BASE, model_type="llama", architectures=["LlamaForCausalLM"],
                        rope_scaling={"type": "linear", "factor": 4.0}, attention_bias=True,
                        mlp_bias=True, hidden_act="gelu"),
    # head_dim other than hidden/heads (16 x 4 heads = 64 != 32), tanh gelu
    "headdim": dict(BASE, model_type="llama", architectures=["LlamaForCausalLM"], head_dim=16,
                    hidden_act="gelu_pytorch_tanh"),
    # Qwen2: q/k/v biases without a config key, no o bias
    "qwen2": dict(BASE, model_type="qwen2", architectures=["Qwen2ForCausalLM"],
                  rope_theta=1000000.0, use_sliding_window=False, sliding_window=4,
                  max_window_layers=2),
    # Mistral with sliding_window null
    "mistral": dict(BASE, model_type="mistral", architectures=["MistralForCausalLM"],
                    sliding_window=None),
    # Mistral with a window of 4 keys, shorter than the prompts
    "mistral_window": dict(BASE, model_type="mistral", architectures=["MistralForCausalLM"],
                           sliding_window=4),
    # Qwen2 with a window of 3 keys in every layer (max_window_layers 0)
    "qwen2_window": dict(BASE, model_type="qwen2", architectures=["Qwen2ForCausalLM"],
                         use_sliding_window=True, sliding_window=3, max_window_layers=0),
}

# (name, config, words the refusal names)
REFUSED = [
    ("yarn", dict(ZOO["llama2"], rope_scaling={"rope_type": "yarn", "factor": 4.0}),
     ["rope_scaling", "yarn"]),
    ("dynamic", dict(ZOO["llama2"], rope_scaling={"type": "dynamic", "factor": 2.0}),
     ["rope_scaling", "dynamic"]),
    ("model_type", dict(ZOO["llama2"], model_type="gemma"), ["model_type", "gemma"]),
    ("quantization", dict(ZOO["llama2"], quantization_config={"quant_method": "gptq",
                                                              "bits": 4}),
     ["quantization_config", "gptq"]),
    ("unknown_key", dict(ZOO["llama2"], logit_softcapping=30.0),
     ["logit_softcapping", "30"]),
    ("qwen2_layer_window", dict(ZOO["qwen2"], use_sliding_window=True, max_window_layers=1),
     ["use_sliding_window", "max_window_layers 1"]),
    ("act", dict(ZOO["llama2"], hidden_act="quick_gelu"), ["hidden_act", "quick_gelu"]),
    ("pretraining_tp", dict(ZOO["llama2"], pretraining_tp=2), ["pretraining_tp", "2"]),
    ("architecture", dict(ZOO["llama2"], architectures=["LlamaForSequenceClassification"]),
     ["architectures", "LlamaForSequenceClassification"]),
    ("mistral_bias", dict(ZOO["mistral"], attention_bias=True), ["attention_bias", "mistral"]),
]


def resolved(cfg):
    """What transformers makes of cfg (the keys the zoo uses)."""
    mt = cfg["model_type"]
    H = cfg["num_attention_heads"]
    r = {"dm": cfg["hidden_size"], "FF": cfg["intermediate_size"], "H": H,
         "KV": cfg.get("num_key_value_heads") or H, "L": cfg["num_hidden_layers"],
         "V": cfg["vocab_size"], "eps": cfg.get("rms_norm_eps", 1e-6),
         "theta": cfg.get("rope_theta", 10000.0), "tied": cfg.get("tie_word_embeddings", False),
         "act": cfg.get("hidden_act", "silu"), "scaling": cfg.get("rope_scaling")}
    r["D"] = cfg.get("head_dim") or r["dm"] // H
    ab = cfg.get("attention_bias", False) if mt == "llama" else False
    r["qkv_bias"] = ab or mt == "qwen2"
    r["o_bias"] = ab
    r["mlp_bias"] = cfg.get("mlp_bias", False) if mt == "llama" else False
    # MistralConfig's sliding_window (default 4096); Qwen2's with
    # use_sliding_window, in layers from max_window_layers on (the zoo: 0)
    r["window"] = None
    if mt == "mistral":
        r["window"] = cfg.get("sliding_window", 4096)
    elif mt == "qwen2" and cfg.get("use_sliding_window"):
        r["window"] = cfg.get("sliding_window", 4096)
    return r


def inv_freq(r):
    """transformers' ROPE_INIT_FUNCTIONS: default, linear, llama3."""
    D, base = r["D"], r["theta"]
    inv = 1.0 / (base ** (np.arange(0, D, 2, dtype=np.float64) / D))
    sc = r["scaling"]
    if not sc:
        return inv
    ty = sc.get("rope_type", sc.get("type"))
    if ty == "linear":
        return inv / sc["factor"]
    assert ty == "llama3"
    factor, lo, hi = sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"]
    old = sc["original_max_position_embeddings"]
    low_wl, high_wl = old / lo, old / hi
    wavelen = 2 * math.pi / inv
    inv_l = np.where(wavelen > low_wl, inv / factor, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
    medium = ~(wavelen < high_wl) * ~(wavelen > low_wl)
    return np.where(medium, smoothed, inv_l)


def act(name, x):
    """ACT2FN."""
    if name in ("silu", "swish"):
        return x / (1 + np.exp(-x))
    if name == "gelu":
        erf = np.vectorize(math.erf)
        return 0.5 * x * (1 + erf(x / math.sqrt(2)))
    if name in ("gelu_pytorch_tanh", "gelu_new", "gelu_fast"):
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    raise ValueError(name)


def weights(cfg, seed):
    r = resolved(cfg)
    rng = np.random.default_rng(seed)
    dm, H, KV, D, FF, V = r["dm"], r["H"], r["KV"], r["D"], r["FF"], r["V"]
    w = lambda *s: (rng.standard_normal(s) / np.sqrt(s[-1])).astype(np.float32)
    b = lambda n: (0.3 * rng.standard_normal(n)).astype(np.float32)
    norm = lambda: (1 + 0.1 * rng.standard_normal(dm)).astype(np.float32)
    t = {"model.embed_tokens.weight": rng.standard_normal((V, dm)).astype(np.float32)}
    for l in range(r["L"]):
        p = "model.layers.%d." % l
        t.update({p + "input_layernorm.weight": norm(), p + "self_attn.q_proj.weight": w(H * D, dm),
                  p + "self_attn.k_proj.weight": w(KV * D, dm),
                  p + "self_attn.v_proj.weight": w(KV * D, dm),
                  p + "self_attn.o_proj.weight": w(dm, H * D),
                  p + "post_attention_layernorm.weight": norm(),
                  p + "mlp.gate_proj.weight": w(FF, dm), p + "mlp.up_proj.weight": w(FF, dm),
                  p + "mlp.down_proj.weight": w(dm, FF)})
        if r["qkv_bias"]:
            t.update({p + "self_attn.q_proj.bias": b(H * D), p + "self_attn.k_proj.bias": b(KV * D),
                      p + "self_attn.v_proj.bias": b(KV * D)})
        if r["o_bias"]:
            t[p + "self_attn.o_proj.bias"] = b(dm)
        if r["mlp_bias"]:
            t.update({p + "mlp.gate_proj.bias": b(FF), p + "mlp.up_proj.bias": b(FF),
                      p + "mlp.down_proj.bias": b(dm)})
    t["model.norm.weight"] = norm()
    if not r["tied"]:
        t["lm_head.weight"] = w(V, dm)
    return t


def forward(cfg, t, seq_ids):
    """The logits [len, vocab] of one sequence (float64)."""
    r = resolved(cfg)
    f = {k: v.astype(np.float64) for k, v in t.items()}
    H, KV, D, eps = r["H"], r["KV"], r["D"], r["eps"]

    def rmsnorm(h, wt):
        return wt * (h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + eps))

    def rotate_half(v):
        return np.concatenate([-v[..., D // 2:], v[..., : D // 2]], axis=-1)

    def proj(h, name, bias):
        y = h @ f[name + ".weight"].T
        return y + f[name + ".bias"] if bias else y

    x = f["model.embed_tokens.weight"][seq_ids]
    S = x.shape[0]
    freqs = np.outer(np.arange(S, dtype=np.float64), inv_freq(r))
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb)[None], np.sin(emb)[None]
    for l in range(r["L"]):
        p = "model.layers.%d." % l
        h = rmsnorm(x, f[p + "input_layernorm.weight"])
        q = proj(h, p + "self_attn.q_proj", r["qkv_bias"]).reshape(S, H, D).transpose(1, 0, 2)
        k = proj(h, p + "self_attn.k_proj", r["qkv_bias"]).reshape(S, KV, D).transpose(1, 0, 2)
        v = proj(h, p + "self_attn.v_proj", r["qkv_bias"]).reshape(S, KV, D).transpose(1, 0, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = np.repeat(k, H // KV, axis=0), np.repeat(v, H // KV, axis=0)
        s = q @ k.transpose(0, 2, 1) * D ** -0.5
        s = s + np.triu(np.full((S, S), -np.inf), 1)
        if r["window"]:
            # transformers' sliding window: key j masked for query i when i - j >= window
            s = s + np.tril(np.full((S, S), -np.inf), -r["window"])
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        o = (a @ v).transpose(1, 0, 2).reshape(S, H * D)
        x = x + proj(o, p + "self_attn.o_proj", r["o_bias"])
        g = rmsnorm(x, f[p + "post_attention_layernorm.weight"])
        m = act(r["act"], proj(g, p + "mlp.gate_proj", r["mlp_bias"])) * \
            proj(g, p + "mlp.up_proj", r["mlp_bias"])
        x = x + proj(m, p + "mlp.down_proj", r["mlp_bias"])
    x = rmsnorm(x, f["model.norm.weight"])
    head = f["model.embed_tokens.weight"] if r["tied"] else f["lm_head.weight"]
    return x @ head.T


def greedy(cfg, t, prompt, n):
    """transformers' greedy generation (full recompute per token)."""
    seq = list(prompt)
    out = []
    for _ in range(n):
        tok = int(np.argmax(forward(cfg, t, np.array(seq))[-1]))
        out.append(tok)
        seq.append(tok)
    return out


def gen(name, d, lens):
    cfg = ZOO[name]
    with open(d + "/config.json", "w") as f:
        json.dump(cfg, f, indent=2)
    seed = sorted(ZOO).index(name) + 101
    t = weights(cfg, seed)
    rng = np.random.default_rng(seed + 1000)
    names = sorted(t, key=lambda k: rng.random())
    write(d + "/model.safetensors", [(k, t[k]) for k in names])
    V = cfg["vocab_size"]
    ids = rng.integers(0, V, size=sum(lens)).astype(np.int32)
    ids[0], ids[-1] = 0, V - 1
    np.save(d + "/ids.npy", ids)
    with open(d + "/lens", "w") as f:
        f.write(",".join(str(n) for n in lens) + "\n")
    out = [forward(cfg, t, s) for s in np.split(ids, np.cumsum(lens)[:-1])]
    np.save(d + "/ref_all.npy", np.concatenate(out))
    np.save(d + "/ref_last.npy", np.stack([o[-1] for o in out]))
    return cfg, t


if __name__ == "__main__":
    if sys.argv[1] == "list":
        print("\n".join(ZOO))
    elif sys.argv[1] == "gen":
        gen(sys.argv[2], sys.argv[3], [int(v) for v in sys.argv[4].split(",")])
    elif sys.argv[1] == "refused":
        for n, c, words in REFUSED:
            print("%s\t%s\t%s" % (n, json.dumps(c), "|".join(words)))
    elif sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3], sys.argv[4]))
    elif sys.argv[1] == "greedy":
        # greedy NAME DIR N: N new ids of each sequence of DIR/ids.npy, one line each
        name, d, n = sys.argv[2], sys.argv[3], int(sys.argv[4])
        t = weights(ZOO[name], sorted(ZOO).index(name) + 101)
        lens = [int(v) for v in open(d + "/lens").read().split(",")]
        for s in np.split(np.load(d + "/ids.npy"), np.cumsum(lens)[:-1]):
            print(" ".join(str(i) for i in greedy(ZOO[name], t, s, n)))
    else:
        sys.exit("usage: hf_zoo.py list | gen NAME DIR L1,L2,... | refused | "
                 "check GOT REF TOL | greedy NAME DIR N")
