"""tests/python/test_zoo.py — the model zoo of issue 34 through es.llama:
the tiny checkpoints of tests/e2e/hf_zoo.py (LLaMA 2, Llama 3.1 and 3.2
with llama3 rope scaling, linear scaling with biases and exact gelu, a
head_dim other than hidden/heads, Qwen2, Mistral with sliding_window
null, Mistral and Qwen2 with windows shorter than the prompts), the logits of every prompt position on 1, 2 and 3 devices against
hf_zoo.py's independent NumPy forward pass (to 1e-4), greedy generation
against transformers' full-recompute loop, and every config of the refused
list refused by name, as eingen --config refuses it (test_hf_zoo.sh).
Also: checkpoint and config must agree (unused tensors, layer counts),
bf16 and f16 checkpoints, a sharded checkpoint's index.json, files that
are not safetensors, argument checks, and a failed step leaving the model
usable."""

import json
import os
import struct
import sys

import numpy as np
import pytest

import einsummable as es

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import hf_zoo  # noqa: E402

LENS = [5, 9, 3]


def make(tmp_path, name):
    d = str(tmp_path / name)
    os.makedirs(d, exist_ok=True)
    cfg, t = hf_zoo.gen(name, d, LENS)
    ids = np.load(os.path.join(d, "ids.npy"))
    prompts = [list(map(int, s)) for s in np.split(ids, np.cumsum(LENS)[:-1])]
    return d, cfg, t, prompts


def rel(got, ref):
    return float(np.max(np.abs(got - ref) / np.maximum(1.0, np.abs(ref))))


@pytest.mark.parametrize("name", sorted(hf_zoo.ZOO))
@pytest.mark.parametrize("ndev", [1, 2, 3])
def test_zoo_logits(tmp_path, name, ndev):
    d, cfg, t, prompts = make(tmp_path, name)
    ref = np.load(os.path.join(d, "ref_all.npy"))
    with es.llama.load(os.path.join(d, "model.safetensors"), os.path.join(d, "config.json"),
                       device=list(range(ndev)), max_len=32, prefill_chunk=4) as m:
        got = np.concatenate(m.logits(prompts))
    err = rel(got, ref)
    assert err <= 1e-4, "%s on %d devices: %g" % (name, ndev, err)


@pytest.mark.parametrize("name", sorted(hf_zoo.ZOO))
def test_zoo_greedy(tmp_path, name):
    d, cfg, t, prompts = make(tmp_path, name)
    want = [hf_zoo.greedy(cfg, t, p, 5) for p in prompts]
    with es.llama.load(os.path.join(d, "model.safetensors"), os.path.join(d, "config.json"),
                       device=[0, 1], max_len=32, prefill_chunk=4) as m:
        got = m.generate(prompts, max_new_tokens=5, eos_token_id=[])
    assert got == want


@pytest.mark.parametrize("name,cfg,words", hf_zoo.REFUSED, ids=[r[0] for r in hf_zoo.REFUSED])
def test_zoo_refused(tmp_path, name, cfg, words):
    d, _, _, _ = make(tmp_path, "mistral" if "window" in name else "llama2")
    path = os.path.join(d, "bad.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    with pytest.raises(es.EinError) as e:
        m = es.llama.load(os.path.join(d, "model.safetensors"), path, max_len=32)
        m.close()
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_read_config_defaults():
    """transformers' defaults for what a config leaves out, per model type."""
    c = es.llama.read_config({"model_type": "llama"})
    assert (c["rope_theta"], c["rms_norm_eps"], c["kv_heads"], c["act"]) == \
        (10000.0, 1e-6, 32, "silu")
    assert c["head_dim"] == 128 and not c["tied"] and c["eos"] == [2]
    c = es.llama.read_config({"model_type": "mistral"})
    assert (c["kv_heads"], c["sliding_window"], c["intermediate_size"]) == (8, 4096, 14336)
    c = es.llama.read_config({"model_type": "qwen2"})
    assert (c["qkv_bias"], c["o_bias"], c["sliding_window"], c["vocab"]) == (True, False, 0,
                                                                            151936)
    c = es.llama.read_config({"model_type": "llama", "hidden_act": "gelu_pytorch_tanh"})
    assert c["act"] == "gelu"
    c = es.llama.read_config({"model_type": "llama", "hidden_act": "gelu"})
    assert c["act"] == "gelu_exact"


def test_unused_tensors_and_layers(tmp_path):
    d, cfg, t, prompts = make(tmp_path, "qwen2")
    st = os.path.join(d, "model.safetensors")
    # the Qwen2 checkpoint (q/k/v biases) under a LLaMA config: the biases are unused
    c = dict(cfg, model_type="llama", architectures=["LlamaForCausalLM"])
    for k in ("use_sliding_window", "sliding_window", "max_window_layers"):
        c.pop(k)
    with pytest.raises(es.EinValueError, match=r"self_attn\.[qkv]_proj\.bias.*allow_unused"):
        es.llama.load(st, c, max_len=32).logits(prompts[:1])
    with es.llama.load(st, c, max_len=32, allow_unused=True) as m:
        assert m.logits(prompts[:1])[0].shape == (5, cfg["vocab_size"])
    # a layer count other than the file's
    with pytest.raises(es.EinValueError, match="num_hidden_layers is 1 but the checkpoint "
                                               "holds layers 0-1"):
        es.llama.load(st, dict(cfg, num_hidden_layers=1), max_len=32)
    with pytest.raises(es.EinValueError, match="num_hidden_layers is 3"):
        es.llama.load(st, dict(cfg, num_hidden_layers=3), max_len=32)


def write_st(path, tensors, dtype):
    """tensors {name: float32} as a safetensors file of F32, F16 or BF16."""
    header, blobs, off = {}, [], 0
    for k, a in tensors.items():
        if dtype == "BF16":
            b = es._core._bf16_from_f32(a).tobytes()
        elif dtype == "F16":
            b = a.astype(np.float16).tobytes()
        else:
            b = a.astype(np.float32).tobytes()
        header[k] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


@pytest.mark.parametrize("dtype", ["BF16", "F16"])
def test_half_checkpoints(tmp_path, dtype):
    """A bf16 or f16 checkpoint runs in its own dtype by default (loose
    tolerance: 16-bit activations), and exactly with dtype="f32" (the
    reference from the same rounded weights)."""
    d, cfg, t, prompts = make(tmp_path, "llama31")
    if dtype == "BF16":
        r = {k: es._core._f32_from_bf16(es._core._bf16_from_f32(v)) for k, v in t.items()}
    else:
        r = {k: v.astype(np.float16).astype(np.float32) for k, v in t.items()}
    st = os.path.join(d, "half.safetensors")
    write_st(st, t, dtype)
    ref = np.concatenate([hf_zoo.forward(cfg, r, np.array(p)) for p in prompts])
    with es.llama.load(st, os.path.join(d, "config.json"), max_len=32, prefill_chunk=4) as m:
        assert m.dtype == dtype.lower()
        got = np.concatenate(m.logits(prompts))
    # measured: 2.3e-2 (bf16), 2.7e-3 (f16)
    assert rel(got, ref) <= (0.06 if dtype == "BF16" else 0.01)
    with es.llama.load(st, os.path.join(d, "config.json"), device=[0, 1], max_len=32,
                       prefill_chunk=4, dtype="f32") as m:
        got = np.concatenate(m.logits(prompts))
    assert rel(got, ref) <= 1e-4


def test_sharded_index_and_bad_files(tmp_path):
    d, cfg, t, prompts = make(tmp_path, "llama2")
    names = sorted(t)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half],
              "model-00002-of-00002.safetensors": names[half:]}
    for f, ks in shards.items():
        write_st(os.path.join(d, f), {k: t[k] for k in ks}, "F32")
    idx = os.path.join(d, "model.safetensors.index.json")
    with open(idx, "w") as f:
        json.dump({"metadata": {}, "weight_map": {k: f for f, ks in shards.items() for k in ks}}, f)
    ref = np.load(os.path.join(d, "ref_all.npy"))
    with es.llama.load(idx, os.path.join(d, "config.json"), max_len=32, prefill_chunk=4) as m:
        assert rel(np.concatenate(m.logits(prompts)), ref) <= 1e-4
    # neither safetensors nor an index: a clear error, not MemoryError
    for bad in (os.path.join(d, "config.json"), os.path.join(d, "ids.npy")):
        with pytest.raises(es.EinValueError, match="not a .safetensors file|not a JSON index|"
                                                   "no weight_map"):
            es.llama.load(bad, os.path.join(d, "config.json"))


def test_arguments_and_failed_step(tmp_path):
    d, cfg, t, prompts = make(tmp_path, "llama2")
    st, cj = os.path.join(d, "model.safetensors"), os.path.join(d, "config.json")
    for kw in ({"max_len": 0}, {"max_len": 2.5}, {"prefill_chunk": 0}, {"dtype": "f64"}):
        with pytest.raises(es.EinValueError):
            es.llama.load(st, cj, **kw)
    with es.llama.load(st, cj, max_len=32, prefill_chunk=4) as m:
        with pytest.raises(es.EinValueError, match="max_new_tokens -3"):
            m.generate(prompts, max_new_tokens=-3)
        with pytest.raises(es.EinValueError, match="integer"):
            m.generate([[1.0, 2.5]], max_new_tokens=2)
        with pytest.raises(es.EinValueError, match="integer"):
            m.step(np.array([1.5]), np.array([0]))
        ref = m.logits(prompts[:1])[0]
        # a bad id: refused, and the same batch size still runs afterwards
        with pytest.raises(es.EinValueError, match="outside"):
            m.step([cfg["vocab_size"]], [0])
        with pytest.raises(es.EinValueError, match="outside"):
            m.prefill([[0, 1, 2, cfg["vocab_size"] + 7]], [0])
        assert rel(m.logits(prompts[:1])[0], ref) == 0
        assert len(m.generate(prompts[:1], max_new_tokens=2)[0]) == 2
