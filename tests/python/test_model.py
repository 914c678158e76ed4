"""tests/python/test_model.py — a whole LLaMA through the package: the tiny
Hugging Face checkpoint of tests/e2e/hf_model.py (config.json +
model.safetensors under transformers' names), built from its config with
Graph.embedding, compiled for 2 and 3 devices, weights bound with
load_safetensors, i32 token ids of packed sequences loaded as a NumPy
array, and the last-token logits compared with that script's independent
NumPy forward pass (to 1e-4)."""

import json
import os
import sys

import numpy as np
import pytest

import einsummable as es

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import hf_model  # noqa: E402


def build_model(cfg, lens):
    """The decoder of LlamaForCausalLM in the HF layout; returns the graph and
    the {input: checkpoint tensor} mapping."""
    T, dm, V = sum(lens), cfg["hidden_size"], cfg["vocab_size"]
    H, KV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    FF, eps, theta = cfg["intermediate_size"], cfg["rms_norm_eps"], cfg["rope_theta"]
    g = es.createGraph()
    m = {}

    def inp(name, shape, tensor, dtype="f32"):
        m[name] = tensor
        return g.insertTensor(es.tensorDesc(shape, dtype), name=name)

    ids = g.insertTensor(es.tensorDesc([T], "i32"), name="ids")
    embed = inp("embed", [V, dm], "model.embed_tokens.weight")
    x = g.embedding(embed, ids)
    lin = lambda a, w: g.einsum("ij,kj->ik", a, w)   # x times w transposed ([out, in])
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        an = inp("an%d" % l, [dm], p + "input_layernorm.weight")
        wq = inp("wq%d" % l, [H * D, dm], p + "self_attn.q_proj.weight")
        wk = inp("wk%d" % l, [KV * D, dm], p + "self_attn.k_proj.weight")
        wv = inp("wv%d" % l, [KV * D, dm], p + "self_attn.v_proj.weight")
        wo = inp("wo%d" % l, [dm, H * D], p + "self_attn.o_proj.weight")
        fn = inp("fn%d" % l, [dm], p + "post_attention_layernorm.weight")
        w1 = inp("w1%d" % l, [FF, dm], p + "mlp.gate_proj.weight")
        w3 = inp("w3%d" % l, [FF, dm], p + "mlp.up_proj.weight")
        w2 = inp("w2%d" % l, [dm, FF], p + "mlp.down_proj.weight")
        h = g.rmsnorm(x, an, eps)
        q = g.rope(lin(h, wq), D, theta, seqs=lens, style="half")
        k = g.rope(lin(h, wk), D, theta, seqs=lens, style="half")
        v = lin(h, wv)
        a = g.attention(g.split_heads(q, D), g.split_heads(k, D), g.split_heads(v, D), seqs=lens)
        x = g.add(x, lin(g.merge_heads(a), wo))
        f = g.rmsnorm(x, fn, eps)
        x = g.add(x, lin(g.mul(g.silu(lin(f, w1)), lin(f, w3)), w2))
    x = g.rmsnorm(x, inp("final_norm", [dm], "model.norm.weight"), eps)
    ends = np.cumsum(lens)
    last = g.concat([g.slice(x, 0, e - 1, e) for e in ends], axis=0) if len(lens) > 1 \
        else g.slice(x, 0, ends[0] - 1, ends[0])
    head = embed if cfg["tie_word_embeddings"] else inp("lm_head", [V, dm], "lm_head.weight")
    logits = g.einsum("ij,kj->ik", last, head, name="logits")
    g.save(logits)
    return g, m


@pytest.mark.parametrize("tied,ndev", [(0, 2), (1, 3)])
def test_hf_model(tmp_path, tied, ndev):
    lens = [5, 9, 3] if not tied else [7, 2, 11, 4]
    d = str(tmp_path)
    hf_model.gen(d, tied, lens)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    g, m = build_model(cfg, lens)
    with es.compileGraph(g, device=list(range(ndev))) as prog:
        assert prog.load_safetensors(os.path.join(d, "model.safetensors"), m) == len(m)
        ids = np.load(os.path.join(d, "ids.npy"))
        assert ids.dtype == np.int32
        prog.load("ids", ids)
        prog.execute()
        got = prog.offload("logits").astype(np.float64)
    want = np.load(os.path.join(d, "ref_last.npy"))
    err = np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want)))
    assert err <= 1e-4, "max relative error %g" % err


def test_integer_tensor_refused():
    g = es.createGraph()
    ids = g.insertTensor(es.tensorDesc([4], np.int32), name="ids")
    assert ids.dtype == "i32"
    with pytest.raises(es.EinError) as e:
        g.relu(ids)
    assert "relu: ids is i32" in str(e.value)
