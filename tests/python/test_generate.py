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
from conftest import close_enough

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


def test_decode_replicated(tiny):
    """Batch 1 on 2 devices (issue 36): the plan search computes every
    rmsnorm and residual add on both devices (split "rep:2", a replicated
    spec: one all-reduce per layer boundary, as Megatron); greedy decoding
    still equals the NumPy reference, and a step's logits equal the
    one-device program's."""
    d, cfg, prompts, want = tiny
    lg = {}
    for ndev in (1, 2):
        with es.llama.load([os.path.join(d, "model.safetensors")],
                           os.path.join(d, "config.json"), device=list(range(ndev)),
                           max_len=48, prefill_chunk=4) as model:
            got = model.generate([prompts[0]], max_new_tokens=16, temperature=0.0)
            assert got == [want[0][:16]]
            lg[ndev] = model.step([prompts[0][0]], [0])
            _, ops = model._progs[1].plan()
            rep = [o for o in ops if o["split"].startswith("rep:")]
            norms = [o for o in ops if o["op"] == "rmsnorm"]
            if ndev == 1:
                assert rep == []
            else:
                assert all(o["split"] == "rep:2" for o in rep)
                # both norms of every layer of the decode step, at least
                assert sum(o["op"] == "rmsnorm" for o in rep) >= 2 * cfg["num_hidden_layers"]
                assert sum(o["op"] == "add" for o in rep) >= 2 * cfg["num_hidden_layers"]
                assert len(norms) > 0
    err = np.max(np.abs(lg[2] - lg[1]) / np.maximum(1.0, np.abs(lg[1])))
    assert err <= 1e-5, "P = 2 against P = 1: %g" % err


def test_entries_with_replicated_specs(tmp_path):
    """A 6-layer tiny LLaMA on 2 devices (issue 36): the plan search runs on
    a prefix of its repeated blocks, replicates the residual adds and
    rmsnorms of the decode step, and may leave the final norm on one device,
    so the last add's copy on the other device feeds nothing: the
    all-reduce's transfer into it belongs to no entry. The prefill entry
    must then skip it as its sender does (it used to wait for it forever);
    prefill and decode logits equal the one-device program's."""
    import faulthandler
    L, dm, FF, H, V = 6, 32, 48, 4, 50
    rng = np.random.default_rng(3)
    cfg = {"model_type": "llama", "hidden_size": dm, "intermediate_size": FF,
           "num_attention_heads": H, "num_key_value_heads": H, "head_dim": dm // H,
           "num_hidden_layers": L, "vocab_size": V, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "tie_word_embeddings": False, "max_position_embeddings": 32}
    t = hf_model.random_llama(rng, dm, L, V, FF, H)
    d = str(tmp_path)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    hf_model.write(os.path.join(d, "model.safetensors"), t)
    prompt = [int(x) for x in rng.integers(0, V, 7)]
    out = {}
    faulthandler.dump_traceback_later(600, exit=True)    # a hang fails, not stalls, CI
    try:
        for ndev in (1, 2):
            with es.llama.load([os.path.join(d, "model.safetensors")],
                               os.path.join(d, "config.json"), device=list(range(ndev)),
                               max_len=32, prefill_chunk=4) as model:
                pre = model.logits([prompt])[0]
                dec = model.step([3], [len(prompt)])
                out[ndev] = (pre, dec, model.generate([prompt], max_new_tokens=6,
                                                      temperature=0.0))
                if ndev == 2:
                    _, ops = model._progs[1].plan()
                    assert any(o["split"] == "rep:2" for o in ops)
    finally:
        faulthandler.cancel_dump_traceback_later()
    for k in (0, 1):
        err = np.max(np.abs(out[2][k] - out[1][k]) / np.maximum(1.0, np.abs(out[1][k])))
        assert err <= 1e-5, "P = 2 against P = 1 (%s): %g" % (("prefill", "decode")[k], err)
    assert out[2][2] == out[1][2]


def _bf16_bits(a):
    """float32 -> bf16 bit patterns, rounded to nearest even (NumPy has no
    bf16), and their exact values as float64."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _stored(a, dtype):
    """(what prog.load takes, the exact stored values as float64) of a
    float32 array in dtype."""
    if dtype == "bf16":
        return _bf16_bits(a)
    h = np.asarray(a, np.float32).astype(np.float16)
    return h, h.astype(np.float64)


@pytest.mark.parametrize("ndev", [1, 2])
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("rows", [1, 3])
def test_decode_products_low_precision(ndev, dtype, rows):
    """A decode step's products in bf16 or f16 (issue 36): 1 and 3 tokens
    by weights in both layouts (a checkpoint's [out, in] through einsum
    ij,kj->ik, and matmul's [in, out]), on 1 and 2 devices. Each product
    reads its operands as stored, sums in f32 and rounds once: within half
    an ulp of the dtype (and f32's summation error) of a float64 product of
    the same stored values. Then a SwiGLU MLP of such products, rounded
    after every operation, within the dtype's tolerance of float64."""
    rng = np.random.default_rng(36 + rows)
    dm, ff = 96, 136
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([rows, dm], dtype), name="x")
    wg = g.insertTensor(es.tensorDesc([ff, dm], dtype), name="wg")     # [out, in]
    wu = g.insertTensor(es.tensorDesc([ff, dm], dtype), name="wu")
    wd = g.insertTensor(es.tensorDesc([ff, dm], dtype), name="wd")     # [in, out]
    pg = g.einsum("ij,kj->ik", x, wg, name="pg")
    pd = g.matmul(x, g.einsum("ij->ji", wd), name="pd")    # [in, out] operand: wd^T
    h = g.mul(g.silu(pg), g.einsum("ij,kj->ik", x, wu))
    y = g.matmul(h, wd, name="y")
    for t in (pg, pd, y):
        g.save(t)
    raw = {"x": rng.standard_normal((rows, dm)).astype(np.float32)}
    for n in ("wg", "wu", "wd"):
        raw[n] = (rng.standard_normal((ff, dm)) / np.sqrt(dm)).astype(np.float32)
    ex = {}
    with es.compileGraph(g, device=list(range(ndev))) as prog:
        for n, a in raw.items():
            v, ex[n] = _stored(a, dtype)
            prog.load(n, v)
        prog.execute()
        got = {n: prog.offload(n).astype(np.float64) for n in ("pg", "pd", "y")}
    half_ulp = 2.0 ** -8 if dtype == "bf16" else 2.0 ** -11   # relative, 8 and 11 bits
    X = ex["x"]
    for n, want in (("pg", X @ ex["wg"].T), ("pd", X @ ex["wd"].T)):
        mag = np.abs(X) @ np.abs(ex["wg" if n == "pg" else "wd"]).T
        err = np.abs(got[n] - want)
        ok = err <= half_ulp * np.abs(want) + dm * 2.0 ** -24 * mag + 2.0 ** -25
        assert ok.all(), "%s %s, %d rows, %d devices: %r, expected %r" % (
            dtype, n, rows, ndev, got[n][~ok][:3], want[~ok][:3])
    gt, up = X @ ex["wg"].T, X @ ex["wu"].T
    want = (gt / (1.0 + np.exp(-gt)) * up) @ ex["wd"]
    bad = close_enough(got["y"], want, rel=3e-2, abs_=1e-3)
    assert bad is None, "%s, %d rows, %d devices: %s" % (dtype, rows, ndev, bad)


def _write_bf16(path, tensors):
    """{name: array} as a .safetensors file of BF16 tensors (float32
    rounded to nearest even), as transformers saves a bf16 checkpoint."""
    header, blobs, off = {}, [], 0
    for name, x in tensors.items():
        u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
        b = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).tobytes()
        header[name] = {"dtype": "BF16", "shape": list(x.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h)
        for b in blobs:
            f.write(b)


@pytest.mark.parametrize("ndev", [1, 2])
def test_bf16_checkpoint(tiny, tmp_path, ndev):
    """Issue 33: a BF16 checkpoint runs in bf16 (weights, caches and
    activations; es.llama takes the checkpoint's dtype): every prompt
    position's logits, chunked and token by token through the decode
    step, within bf16's tolerance of the float64 forward pass of the f32
    weights (2^-8 relative per rounding, a few hundred roundings deep);
    and not the f32 computation of the same bf16 weights (dtype="f32"),
    which lies closer to the reference."""
    d, cfg, prompts, want = tiny
    w = read_safetensors(os.path.join(d, "model.safetensors"))
    st = str(tmp_path / "model.safetensors")
    _write_bf16(st, w)
    ref = np.split(np.load(os.path.join(d, "ref_all.npy")), np.cumsum(LENS)[:-1])
    scale = max(np.max(np.abs(r)) for r in ref)
    errs = {}
    for dtype in (None, "f32"):
        with es.llama.load([st], os.path.join(d, "config.json"), device=list(range(ndev)),
                           max_len=48, prefill_chunk=4, dtype=dtype) as model:
            assert model.dtype == (dtype or "bf16")
            chunked = model.logits(prompts)
            err = max(np.max(np.abs(lg - r)) for lg, r in zip(chunked, ref)) / scale
            assert err <= 0.05, "%s: chunked logits, scaled error %g" % (dtype, err)
            for t in range(max(LENS)):
                ids = [p[t] if t < len(p) else 0 for p in prompts]
                lg = model.step(ids, [t] * len(prompts))
                for b, p in enumerate(prompts):
                    if t < len(p):
                        e = np.max(np.abs(lg[b] - ref[b][t])) / scale
                        assert e <= 0.05, "%s: position %d of prompt %d: %g" % (dtype, t, b, e)
                        err = max(err, e)
            errs[dtype or "bf16"] = err
    print("scaled errors against float64:", errs)
    # bf16 activations round where f32 ones do not: a larger error, never 0
    assert errs["bf16"] > errs["f32"] > 0.0, errs


def test_model_check_script(tmp_path):
    """Issue 33: tools/llama_model_check.py, gpu-check's whole-model check,
    on CPU devices with its NumPy float64 reference standing in for
    PyTorch (which has the GPU run's dims): a random bf16 checkpoint in
    transformers' layout, a 32-token prompt prefilled in chunks of 16 by
    es.llama in bf16 and 8 teacher-forced decode steps agree with it; a
    reference of other weights is a MISMATCH (exit 1)."""
    import subprocess
    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                        "llama_model_check.py")
    dims = ["--layers", "2", "--d", "64", "--ff", "96", "--heads", "4", "--kv-heads", "2",
            "--vocab", "100", "--prompt", "32", "--new", "8"]
    d = str(tmp_path / "m")
    r = subprocess.run([sys.executable, tool, "numpy", d] + dims, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("reference (numpy): prefill 1x32 ")
    ours = [sys.executable, tool, "ours", d, "--backend", "cpu", "--devices", "2", "--chunk", "16"]
    r = subprocess.run(ours, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    line = [x for x in r.stdout.splitlines() if x.startswith("logits: ")]
    assert line and line[0].startswith("logits: 9 rows, max scaled error ") and \
        line[0].endswith(": ok"), r.stdout
    err = float(line[0].split("max scaled error ")[1].split()[0])
    assert 0.0 < err <= 0.05, line
    # the reference of another model (seed 2): its logits are not ours
    ref2 = str(tmp_path / "m2")
    r = subprocess.run([sys.executable, tool, "numpy", ref2, "--seed", "2"] + dims,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    os.replace(os.path.join(ref2, "ref.npz"), os.path.join(d, "ref.npz"))
    r = subprocess.run(ours, capture_output=True, text=True)
    assert r.returncode == 1 and r.stdout.rstrip().endswith(": MISMATCH"), r.stdout + r.stderr
    # a chunk that does not divide the prompt is refused by name
    r = subprocess.run(ours[:-1] + ["24"], capture_output=True, text=True)
    assert r.returncode != 0 and "--chunk 24 must divide" in r.stderr
