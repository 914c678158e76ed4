"""Quantized weights (issue 36): the library's q8_0 and q4_0 bytes against an
independent NumPy implementation of ggml's reference quantizers
(quantize_row_q8_0_ref, quantize_row_q4_0_ref), on random rows, rows with
exact halves, all-zero blocks and blocks whose largest element is negative."""
import ctypes

import numpy
import pytest

from einsummable import _lib as L

Q8_0, Q4_0 = 5, 6


def np_q8_0(x):
    x = x.reshape(-1, 32).astype(numpy.float32)
    amax = numpy.abs(x).max(axis=1)
    d = (amax / numpy.float32(127)).astype(numpy.float32)
    with numpy.errstate(divide="ignore"):
        inv = numpy.where(d != 0, numpy.float32(1) / d, numpy.float32(0)).astype(numpy.float32)
    v = (x * inv[:, None]).astype(numpy.float32)
    a = numpy.abs(v).astype(numpy.float64)  # roundf: halves away from 0, exact in f64
    q = (numpy.sign(v) * numpy.floor(a + 0.5)).astype(numpy.int8)
    out = numpy.zeros((x.shape[0], 34), numpy.uint8)
    out[:, :2] = d.astype(numpy.float16).view(numpy.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(numpy.uint8)
    return out.reshape(-1)


def np_q4_0(x):
    x = x.reshape(-1, 32).astype(numpy.float32)
    i = numpy.argmax(numpy.abs(x), axis=1)  # the first of the largest magnitude
    m = x[numpy.arange(x.shape[0]), i]
    d = (m / numpy.float32(-8)).astype(numpy.float32)
    with numpy.errstate(divide="ignore"):
        inv = numpy.where(d != 0, numpy.float32(1) / d, numpy.float32(0)).astype(numpy.float32)
    v = ((x * inv[:, None]).astype(numpy.float32) + numpy.float32(8.5)).astype(numpy.float32)
    q = numpy.minimum(15, numpy.trunc(v).astype(numpy.int32)).astype(numpy.uint8)
    out = numpy.zeros((x.shape[0], 18), numpy.uint8)
    out[:, :2] = d.astype(numpy.float16).view(numpy.uint8).reshape(-1, 2)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return out.reshape(-1)


def ours(code, x, nbytes):
    f = L.lib.cdll.ein_dtype_from_f32
    f.restype = None
    f.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    x = numpy.ascontiguousarray(x, numpy.float32)
    out = numpy.zeros(nbytes, numpy.uint8)
    f(code, x.ctypes.data, out.ctypes.data, x.size)
    return out


def cases():
    rng = numpy.random.default_rng(36)
    yield rng.standard_normal(32 * 64).astype(numpy.float32)
    yield (rng.integers(-254, 255, 32 * 16) / 2).astype(numpy.float32)  # exact halves
    z = rng.standard_normal(32 * 4).astype(numpy.float32)
    z[:32] = 0
    z[32] = -7.0  # a negative extreme
    z[64:96] *= 1e-30
    yield z


@pytest.mark.parametrize("code,ref,bb", [(Q8_0, np_q8_0, 34), (Q4_0, np_q4_0, 18)])
def test_bytes_match_numpy(code, ref, bb):
    for x in cases():
        want = ref(x)
        got = ours(code, x, x.size // 32 * bb)
        bad = numpy.nonzero(got != want)[0]
        assert bad.size == 0, "byte %d of %d differs: %d vs %d" % (
            bad[0], got.size, got[bad[0]], want[bad[0]])


# ---- es.llama.load(quantization=) on a tiny checkpoint ---------------------

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import einsummable as es  # noqa: E402
from einsummable import _core  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import hf_model  # noqa: E402

PROJ = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def _tiny_llama(d, dm, ff, hd, seed):
    """hf_model's tiny LLaMA in directory d: d_model dm, 4 heads of hd (2 kv
    heads), d_ff ff, 2 layers, vocab 61, Gaussian weights from `seed`;
    returns (d, config, {name: array})."""
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": dm,
           "intermediate_size": ff, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": hd, "num_hidden_layers": 2, "vocab_size": 61, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "float32",
           "max_position_embeddings": 64, "hidden_act": "silu"}
    with open(d + "/config.json", "w") as f:
        json.dump(cfg, f)
    rng = numpy.random.default_rng(seed)
    w = lambda *s: (rng.standard_normal(s) / numpy.sqrt(s[-1])).astype(numpy.float32)
    kv = 2 * hd
    t = {"model.embed_tokens.weight": rng.standard_normal((61, dm)).astype(numpy.float32),
         "model.norm.weight": numpy.ones(dm, numpy.float32), "lm_head.weight": w(61, dm)}
    for l in range(2):
        p = "model.layers.%d." % l
        t.update({p + "input_layernorm.weight": numpy.ones(dm, numpy.float32),
                  p + "post_attention_layernorm.weight": numpy.ones(dm, numpy.float32),
                  p + "self_attn.q_proj.weight": w(dm, dm), p + "self_attn.k_proj.weight": w(kv, dm),
                  p + "self_attn.v_proj.weight": w(kv, dm), p + "self_attn.o_proj.weight": w(dm, dm),
                  p + "mlp.gate_proj.weight": w(ff, dm), p + "mlp.up_proj.weight": w(ff, dm),
                  p + "mlp.down_proj.weight": w(dm, ff)})
    hf_model.write(d + "/model.safetensors", sorted(t.items()))
    return d, cfg, t


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny LLaMA with d_ff 64 (quantized dims must be multiples of 32):
    d_model 32, 4 heads of 8 (2 kv heads), 2 layers, vocab 61."""
    return _tiny_llama(str(tmp_path_factory.mktemp("qllama")), 32, 64, 8, 36)


PROMPTS = [[3, 17, 42, 5, 9, 60, 1, 0], [7, 7, 30]]


def _logits(d, **kw):
    with es.llama.load([d + "/model.safetensors"], d + "/config.json", max_len=32, **kw) as m:
        return m.logits(PROMPTS), m.generate(PROMPTS, max_new_tokens=16)


def _rel(a, b):
    return numpy.sqrt(sum(float(numpy.sum((x - y) ** 2)) for x, y in zip(a, b)) /
                      sum(float(numpy.sum(y ** 2)) for y in b))


@pytest.mark.parametrize("q,dt", [("int8", "q8_0"), ("q4", "q4_0")])
def test_llama_quantized_is_the_dequantized_model(tiny, tmp_path, q, dt):
    """quantization= runs the model whose projections are the dequantised
    blocks: the same logits as an f32 checkpoint holding those values,
    split over two and four devices (to 2e-4 relative for int8: the
    few-row kernel rounds activations to int16 per block of 32; 3e-2 for
    q4, whose kernel rounds them to int8, kernels/cpu/kn_quant.c: 1.1%
    measured)."""
    d, cfg, t = tiny
    deq = dict(t)
    for l in range(2):
        for p in PROJ:
            k = "model.layers.%d.%s.weight" % (l, p)
            deq[k] = _core.dequantize(_core.quantize(t[k], dt), dt).reshape(t[k].shape)
    e = str(tmp_path)
    hf_model.write(e + "/model.safetensors", sorted(deq.items()))
    with open(e + "/config.json", "w") as f:
        json.dump(cfg, f)
    ref, _ = _logits(e)
    for dev in ([0, 1], [0, 1, 2, 3]):
        got, _ = _logits(d, quantization=q, device=dev)
        r = _rel(got, ref)
        assert r <= (2e-4 if q == "int8" else 3e-2), (q, dev, r)


def test_llama_int8_accuracy(tiny):
    """int8 against f32: logits within 2% relative, top-1 the same at every
    prompt position, and the first 16 greedy tokens equal; q4 reported."""
    d, _, _ = tiny
    ref, ref_ids = _logits(d)
    got, ids = _logits(d, quantization="int8")
    r = _rel(got, ref)
    top = numpy.mean(numpy.concatenate([numpy.argmax(g, -1) == numpy.argmax(x, -1)
                                        for g, x in zip(got, ref)]))
    print("int8: logits relative error %.5f, top-1 agreement %.3f" % (r, top))
    assert r <= 0.02 and top == 1.0
    assert ids == ref_ids
    g4, ids4 = _logits(d, quantization="q4")
    top4 = numpy.mean(numpy.concatenate([numpy.argmax(g, -1) == numpy.argmax(x, -1)
                                         for g, x in zip(g4, ref)]))
    print("q4: logits relative error %.5f, top-1 agreement %.3f, greedy ids equal %s"
          % (_rel(g4, ref), top4, ids4 == ref_ids))


def test_llama_quantization_refusals(tiny, tmp_path):
    d, cfg, t = tiny
    with pytest.raises(es.EinError, match="quantization 'int4'"):
        es.llama.load([d + "/model.safetensors"], d + "/config.json", quantization="int4")
    # a projection dim that is not a multiple of 32
    e = str(tmp_path)
    c = dict(cfg, intermediate_size=40)
    with open(e + "/config.json", "w") as f:
        json.dump(c, f)
    with pytest.raises(es.EinError, match="intermediate_size is 40"):
        es.llama.load([d + "/model.safetensors"], e + "/config.json", quantization="int8")
    # a pre-quantized checkpoint is refused by its format
    c = dict(cfg, quantization_config={"quant_method": "gptq", "bits": 4})
    with open(e + "/config.json", "w") as f:
        json.dump(c, f)
    with pytest.raises(es.EinError, match="GPTQ"):
        es.llama.load([d + "/model.safetensors"], e + "/config.json")


# ---- a quantized input through the package: load, load_safetensors ---------

@pytest.mark.parametrize("dt,st", [("q8_0", "f32"), ("q4_0", "f16"), ("q8_0", "bf16")])
def test_graph_quantized_input(tmp_path, dt, st):
    """y = x w^T with w [40, 96] quantized: given as float values (quantized
    by load), as quantize()'s blocks, or bound from a safetensors file of
    f32, f16 or bf16 values (quantized as each device loads its block, as
    einrun --weights does); against NumPy on the dequantised weights, on
    two and three devices (a random plan that may split the contraction)."""
    rng = numpy.random.default_rng(7)
    X = rng.standard_normal((3, 96)).astype(numpy.float32)
    W = rng.standard_normal((40, 96)).astype(numpy.float32)
    if st == "f16":
        W = W.astype(numpy.float16).astype(numpy.float32)
    if st == "bf16":
        W = _core._f32_from_bf16(_core._bf16_from_f32(W)).reshape(W.shape)
    Wd = _core.dequantize(_core.quantize(W, dt), dt).astype(numpy.float64)
    ref = X.astype(numpy.float64) @ Wd.T
    # the few-row kernel's rounded activations (int16 for q8_0, int8 for
    # q4_0): at most max|x| / 65534 (254) per element of each block of 32,
    # times the weights' magnitudes
    xb = numpy.abs(X).reshape(3, 3, 32).max(axis=2) / (65534 if dt == "q8_0" else 254)
    wb = numpy.abs(Wd).reshape(40, 3, 32).sum(axis=2)
    tol = 1.01 * xb @ wb.T + 1e-5
    path = str(tmp_path / "w.safetensors")
    if st == "bf16":
        hf_model.write(path, [("w", W)])   # f32 holding bf16 values: bf16 written below
        with open(path, "rb") as f:
            raw = f.read()
        n = int.from_bytes(raw[:8], "little")
        hdr = json.loads(raw[8:8 + n])
        hdr["w"]["dtype"] = "BF16"
        hdr["w"]["data_offsets"] = [0, W.size * 2]
        h = json.dumps(hdr).encode()
        h += b" " * (-len(h) % 8)
        with open(path, "wb") as f:
            f.write(len(h).to_bytes(8, "little") + h + _core._bf16_from_f32(W).tobytes())
    else:
        hf_model.write(path, [("w", W.astype(numpy.float16 if st == "f16" else numpy.float32))])
    for ndev, sel in ((2, None), (3, "random")):
        g = es.createGraph()
        x = g.insertTensor(es.tensorDesc([3, 96], "f32"), name="x")
        w = g.insertTensor(es.tensorDesc([40, 96], dt), name="w")
        y = g.einsum("ij,kj->ik", x, w, name="y")
        g.save(y)
        kw = {"selector": sel} if sel else {}
        with es.compileGraph(g, device=list(range(ndev)), **kw) as prog:
            prog.load(x, X)
            for how in ("values", "blocks", "file"):
                if how == "values":
                    prog.load(w, W)
                elif how == "blocks":
                    prog.load(w, _core.quantize(W, dt))
                else:
                    assert prog.load_safetensors(path) == 1
                prog.execute()
                got = prog.offload(y)
                err = numpy.abs(got - ref)
                assert (err <= tol).all(), (how, ndev, err.max())
            with pytest.raises(es.EinError, match="uint8 blocks from quantize"):
                prog.load(w, W.astype(numpy.int32))


# ---- f8e4m3: fp8 e4m3fn weights with an f32 scale per 128 (issue 36) -------

F8E4M3 = 7


def _e4m3_values():
    """The 256 e4m3fn codes' values from the format's definition (bias 7, 3
    mantissa bits, exponent field 0 subnormal, S.1111.111 NaN)."""
    c = numpy.arange(256)
    e, m = (c >> 3) & 15, c & 7
    v = numpy.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))
    v = numpy.where(c & 0x80, -v, v)
    v[(e == 15) & (m == 7)] = numpy.nan
    return v


def np_f8e4m3(x):
    """Blocks of 128: the f32 scale amax / 448 (little endian), then each x /
    scale (f32) as the nearest e4m3fn code, ties to the even code, past 448
    saturated; an all-zero block all zeros. By search over the codes, not
    by bit manipulation."""
    x = x.reshape(-1, 128).astype(numpy.float32)
    s = (numpy.abs(x).max(axis=1) / numpy.float32(448)).astype(numpy.float32)
    with numpy.errstate(divide="ignore", invalid="ignore"):
        v = numpy.where(s[:, None] != 0, x / s[:, None], numpy.float32(0)).astype(numpy.float64)
    vals = _e4m3_values()
    fin = numpy.nonzero(~numpy.isnan(vals))[0]
    codes = numpy.empty(v.shape, numpy.uint8)
    flat, out = v.reshape(-1), codes.reshape(-1)
    for i, t in enumerate(flat):
        cand = fin[numpy.signbit(vals[fin]) == numpy.signbit(t)]
        d = numpy.abs(vals[cand] - t)
        best = cand[d == d.min()]
        out[i] = best[(best & 1) == 0][0] if best.size > 1 else best[0]
    b = numpy.zeros((x.shape[0], 132), numpy.uint8)
    b[:, :4] = s.astype("<f4").view(numpy.uint8).reshape(-1, 4)
    b[:, 4:] = codes
    return b.reshape(-1)


def test_f8e4m3_bytes_match_numpy():
    rng = numpy.random.default_rng(8)
    xs = [rng.standard_normal(128 * 8).astype(numpy.float32),
          (rng.integers(-900, 900, 128 * 4) / 2).astype(numpy.float32)]
    z = rng.standard_normal(128 * 3).astype(numpy.float32)
    z[:128] = 0
    z[130] = -9.0
    z[256:] *= 1e-30
    xs.append(z)
    # every code's value and the midpoints between neighbours, in one block
    # scaled by 1 (amax 448)
    vals = _e4m3_values()[:0x7f]
    mids = (vals[:-1] + vals[1:]) / 2
    t = numpy.resize(numpy.concatenate([vals, mids]).astype(numpy.float32), 256)
    t[128:] *= -1
    t[255] = -448.0    # both blocks' scale 1: the values and midpoints exact
    xs.append(t)
    for x in xs:
        want = np_f8e4m3(x)
        got = ours(F8E4M3, x, x.size // 128 * 132)
        bad = numpy.nonzero(got != want)[0]
        assert bad.size == 0, "byte %d of %d differs: %d vs %d" % (
            bad[0], got.size, got[bad[0]], want[bad[0]])
        back = _core.dequantize(got, "f8e4m3")
        s = got.reshape(-1, 132)[:, :4].copy().view("<f4")
        ref = (s * _e4m3_values()[got.reshape(-1, 132)[:, 4:]]).astype(numpy.float32)
        assert numpy.array_equal(back.reshape(-1), ref.reshape(-1))


def test_f8e4m3_matches_ml_dtypes():
    """The codes against ml_dtypes' float8_e4m3fn (skipped without it)."""
    mld = pytest.importorskip("ml_dtypes")
    codes = numpy.arange(256, dtype=numpy.uint8)
    ref = codes.view(mld.float8_e4m3fn).astype(numpy.float32)
    blk = numpy.zeros(2 * 132, numpy.uint8)
    blk[:4] = numpy.array([1.0], "<f4").view(numpy.uint8)
    blk[132:136] = blk[:4]
    blk[4:132], blk[136:] = codes[:128], codes[128:]
    got = _core.dequantize(blk, "f8e4m3")
    assert numpy.array_equal(numpy.isnan(got), numpy.isnan(ref))
    ok = ~numpy.isnan(ref)
    assert numpy.array_equal(got[ok], ref[ok])
    x = numpy.random.default_rng(3).standard_normal(128 * 4).astype(numpy.float32) * 100
    q = _core.quantize(x, "f8e4m3").reshape(-1, 132)
    s = q[:, :4].copy().view("<f4")
    want = (x.reshape(-1, 128) / s).astype(mld.float8_e4m3fn).view(numpy.uint8)
    assert numpy.array_equal(q[:, 4:], want)


@pytest.fixture(scope="module")
def tiny128(tmp_path_factory):
    """A tiny LLaMA whose projections' input dims are multiples of 128
    (f8e4m3's blocks): d_model 128, 4 heads of 32 (2 kv heads), d_ff 256,
    2 layers, vocab 61."""
    return _tiny_llama(str(tmp_path_factory.mktemp("f8llama")), 128, 256, 32, 37)


def test_llama_fp8_is_the_dequantized_model(tiny128, tmp_path):
    """quantization="fp8" runs the model whose projections are the
    dequantised f8e4m3 blocks (the activations stay f32: 1e-5 relative),
    on one and two devices; and against f32 it is reported (relative error,
    top-1 agreement, greedy tokens) and bounded loosely (e4m3 keeps 3
    mantissa bits: about 2-3% per weight)."""
    d, cfg, t = tiny128
    deq = dict(t)
    for l in range(2):
        for p in PROJ:
            k = "model.layers.%d.%s.weight" % (l, p)
            deq[k] = _core.dequantize(_core.quantize(t[k], "f8e4m3"), "f8e4m3").reshape(t[k].shape)
    e = str(tmp_path)
    hf_model.write(e + "/model.safetensors", sorted(deq.items()))
    with open(e + "/config.json", "w") as f:
        json.dump(cfg, f)
    ref, _ = _logits(e)
    for dev in ([0], [0, 1]):
        got, _ = _logits(d, quantization="fp8", device=dev)
        r = _rel(got, ref)
        assert r <= 1e-5, (dev, r)
    f32, f32_ids = _logits(d)
    got, ids = _logits(d, quantization="fp8")
    r = _rel(got, f32)
    top = numpy.mean(numpy.concatenate([numpy.argmax(g, -1) == numpy.argmax(x, -1)
                                        for g, x in zip(got, f32)]))
    print("fp8: logits relative error %.5f, top-1 agreement %.3f, greedy ids equal %s"
          % (r, top, ids == f32_ids))
    assert r <= 0.1


def test_llama_fp8_refusals(tiny):
    """The 32-wide tiny model: its projections' input dims are not multiples
    of 128, named with the tensors that read them."""
    d, _, _ = tiny
    with pytest.raises(es.EinError, match=r"q/k/v_proj and gate/up_proj: hidden_size is 32.*"
                       r"down_proj: intermediate_size is 64"):
        es.llama.load([d + "/model.safetensors"], d + "/config.json", quantization="fp8")


def test_graph_f8e4m3_input(tmp_path):
    """y = x w^T with w [40, 256] f8e4m3, given as float values (quantized
    by load), as quantize()'s blocks, or bound from a safetensors file of
    f32 values (quantized as each device loads its block, as einrun
    --weights does), on one and three devices (a random
    plan that may split the contraction, at 128-element blocks only):
    against NumPy on the dequantised weights (f32 activations)."""
    rng = numpy.random.default_rng(9)
    X = rng.standard_normal((3, 256)).astype(numpy.float32)
    W = rng.standard_normal((40, 256)).astype(numpy.float32)
    Wd = _core.dequantize(_core.quantize(W, "f8e4m3"), "f8e4m3").astype(numpy.float64)
    ref = X.astype(numpy.float64) @ Wd.T
    tol = 1e-5 * (numpy.abs(X).astype(numpy.float64) @ numpy.abs(Wd).T) + 1e-6
    path = str(tmp_path / "w8.safetensors")
    hf_model.write(path, [("w", W)])
    for ndev, sel in ((1, None), (3, "random")):
        g = es.createGraph()
        x = g.insertTensor(es.tensorDesc([3, 256], "f32"), name="x")
        w = g.insertTensor(es.tensorDesc([40, 256], "f8e4m3"), name="w")
        y = g.einsum("ij,kj->ik", x, w, name="y")
        g.save(y)
        kw = {"selector": sel} if sel else {}
        with es.compileGraph(g, device=list(range(ndev)), **kw) as prog:
            prog.load(x, X)
            for how in ("values", "blocks", "file"):
                if how == "file":
                    assert prog.load_safetensors(path) == 1
                else:
                    prog.load(w, W if how == "values" else _core.quantize(W, "f8e4m3"))
                prog.execute()
                err = numpy.abs(prog.offload(y) - ref)
                assert (err <= tol).all(), (how, ndev, err.max())
    g = es.createGraph()
    with pytest.raises(es.EinError, match="multiple of 128"):
        g.insertTensor(es.tensorDesc([40, 96], "f8e4m3"), name="w")


def test_saved_program_keeps_f8e4m3(tmp_path):
    """A program with an f8e4m3 weight, split over three devices (a random
    plan), saved and loaded again: the loaded program takes the same blocks
    and gives the same bytes out."""
    rng = numpy.random.default_rng(10)
    X = rng.standard_normal((5, 384)).astype(numpy.float32)
    Wq = _core.quantize(rng.standard_normal((24, 384)).astype(numpy.float32), "f8e4m3")
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([5, 384], "f32"), name="x")
    w = g.insertTensor(es.tensorDesc([24, 384], "f8e4m3"), name="w")
    g.save(g.einsum("ij,kj->ik", x, w, name="y"))
    path = str(tmp_path / "f8.einprog")
    with es.compileGraph(g, device=[0, 1, 2], selector="random") as prog:
        prog.load("x", X)
        prog.load("w", Wq)
        prog.execute()
        here = prog.offload("y")
        prog.save(path)
    with es.load_program(path) as p:
        p.load("x", X)
        p.load("w", Wq)
        p.execute()
        assert numpy.array_equal(p.offload("y"), here)
        with pytest.raises(es.EinError):
            p.load("w", Wq[:, :-1])   # not whole blocks
    ref = X.astype(numpy.float64) @ _core.dequantize(Wq, "f8e4m3").astype(numpy.float64).T
    assert numpy.max(numpy.abs(here - ref)) <= 1e-4
