"""tests/python/test_generate.py — generation (issue 25) through
es.llama: the tiny random LLaMA of tests/e2e/hf_model.py (config.json +
model.safetensors under transformers' names), greedy decoding of 32 new
tokens for a batch of 3 prompts of different lengths equals an independent
NumPy greedy generation with a key/value cache (float64), on 1 to 4
CPU devices; the logits of every prompt position equal hf_model.py's
full-sequence forward pass to 1e-4; sampling with a seed is reproducible;
an end-of-sequence id stops a sequence. Prompts are prefilled in chunks of
4 tokens (the 9-token prompt takes several) through the prefill entry point,
which shares its caches with the decode step; the chunked logits equal the
token-by-token ones of the decode step."""

import json
import os
import sys

import numpy as np
import pytest

import einsummable as es

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import hf_model  # noqa: E402

LENS = [5, 9, 3]
NEW = 32


def read_safetensors(path):
    """{name: float64 array} of an F32 .safetensors file (its own format:
    8-byte header length, JSON header, data)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32"
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(data[a:b], np.float32).reshape(v["shape"]).astype(np.float64)
    return out


def greedy_ref(w, cfg, prompt, n_new):
    """transformers' greedy generation for one sequence, token by token
    with a key/value cache per layer (float64)."""
    dm, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D, eps, base = cfg["head_dim"], cfg["rms_norm_eps"], cfg["rope_theta"]
    inv = 1.0 / (base ** (np.arange(0, D, 2, dtype=np.float64) / D))
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    kc = [[] for _ in range(cfg["num_hidden_layers"])]
    vc = [[] for _ in range(cfg["num_hidden_layers"])]

    def norm(h, g):
        return g * h / np.sqrt(np.mean(h * h) + eps)

    def rope(v, p):                      # v [heads, D], rotate_half at position p
        a = np.concatenate([p * inv, p * inv])
        rh = np.concatenate([-v[:, D // 2:], v[:, :D // 2]], axis=1)
        return v * np.cos(a) + rh * np.sin(a)

    def step(tok, p):
        x = w["model.embed_tokens.weight"][tok]
        for l in range(cfg["num_hidden_layers"]):
            pre = "model.layers.%d." % l
            h = norm(x, w[pre + "input_layernorm.weight"])
            q = rope((w[pre + "self_attn.q_proj.weight"] @ h).reshape(H, D), p)
            k = rope((w[pre + "self_attn.k_proj.weight"] @ h).reshape(KV, D), p)
            v = (w[pre + "self_attn.v_proj.weight"] @ h).reshape(KV, D)
            kc[l].append(k)
            vc[l].append(v)
            K, Vv = np.stack(kc[l], 1), np.stack(vc[l], 1)      # [KV, t, D]
            o = np.empty((H, D))
            for qh in range(H):
                s = K[qh // (H // KV)] @ q[qh] / np.sqrt(D)
                a = np.exp(s - s.max())
                o[qh] = (a / a.sum()) @ Vv[qh // (H // KV)]
            x = x + w[pre + "self_attn.o_proj.weight"] @ o.reshape(-1)
            f = norm(x, w[pre + "post_attention_layernorm.weight"])
            gate = w[pre + "mlp.gate_proj.weight"] @ f
            x = x + w[pre + "mlp.down_proj.weight"] @ (
                gate / (1 + np.exp(-gate)) * (w[pre + "mlp.up_proj.weight"] @ f))
        return head @ norm(x, w["model.norm.weight"])

    for p, tok in enumerate(prompt):
        lg = step(tok, p)
    out = []
    for i in range(n_new):
        tok = int(np.argmax(lg))
        out.append(tok)
        lg = step(tok, len(prompt) + i)
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("tiny"))
    hf_model.gen(d, 0, LENS)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    ids = np.load(os.path.join(d, "ids.npy"))
    prompts = [list(map(int, p)) for p in np.split(ids, np.cumsum(LENS)[:-1])]
    w = read_safetensors(os.path.join(d, "model.safetensors"))
    want = [greedy_ref(w, cfg, p, NEW) for p in prompts]
    return d, cfg, prompts, want


@pytest.mark.parametrize("ndev", [1, 2, 3, 4])
def test_greedy(tiny, ndev):
    d, cfg, prompts, want = tiny
    with es.llama.load([os.path.join(d, "model.safetensors")], os.path.join(d, "config.json"),
                       device=list(range(ndev)), max_len=48, prefill_chunk=4) as model:
        got = model.generate(prompts, max_new_tokens=NEW, temperature=0.0)
        assert got == want
        assert model.last_stats["prefill_steps"] == 2   # 8 tokens of the longest prompt
        if ndev == 2:
            # every prompt position's logits against the full forward pass
            ref = np.split(np.load(os.path.join(d, "ref_all.npy")), np.cumsum(LENS)[:-1])
            chunked = model.logits(prompts)
            for lg, r in zip(chunked, ref):
                err = np.max(np.abs(lg - r) / np.maximum(1.0, np.abs(r)))
                assert err <= 1e-4, "max relative error %g" % err
            # the same positions token by token through the decode step
            for t in range(max(LENS)):
                ids = [p[t] if t < len(p) else 0 for p in prompts]
                lg = model.step(ids, [t] * len(prompts))
                for b, p in enumerate(prompts):
                    if t < len(p):
                        err = np.max(np.abs(lg[b] - chunked[b][t]))
                        assert err <= 1e-5, "position %d of prompt %d: %g" % (t, b, err)
            # sampling: the same seed gives the same ids, another seed others
            a = model.generate(prompts, max_new_tokens=8, temperature=1.0, top_k=5, seed=7)
            b = model.generate(prompts, max_new_tokens=8, temperature=1.0, top_k=5, seed=7)
            c = model.generate(prompts, max_new_tokens=8, temperature=1.0, top_k=5, seed=8)
            assert a == b and a != c
            # an end-of-sequence id stops its sequence (and is kept)
            e = model.generate(prompts, max_new_tokens=NEW, eos_token_id=want[1][3])
            assert e[1] == want[1][:4]
            assert all(len(s) <= NEW for s in e)
            with pytest.raises(es.EinValueError):
                model.generate([[0] * 40], max_new_tokens=9)   # past max_len


@pytest.mark.parametrize("ndev", [2, 3])
def test_greedy_megatron(tiny, ndev):
    """strategy="megatron" (o_proj and down_proj split on their
    contraction, the head on the vocabulary): the same ids, and the decode
    entry's plan has two aggregations per layer."""
    d, cfg, prompts, want = tiny
    with es.llama.load([os.path.join(d, "model.safetensors")], os.path.join(d, "config.json"),
                       device=list(range(ndev)), max_len=48, prefill_chunk=4,
                       strategy="megatron") as model:
        got = model.generate(prompts, max_new_tokens=NEW, temperature=0.0)
        assert got == want
    with pytest.raises(es.EinValueError):
        es.llama.load([os.path.join(d, "model.safetensors")], os.path.join(d, "config.json"),
                      device=[0, 1], max_len=48, strategy="nonesuch").generate(
                          prompts, max_new_tokens=1)
