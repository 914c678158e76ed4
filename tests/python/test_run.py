"""tests/python/test_run.py — compiled programs on CPU devices: the FFN and
a LLaMA block built in Python, compiled for 1, 2 and 4 devices (naive and
synthesised exchanges), executed several times with new inputs and compared
with NumPy references in float64; loading errors; the program's life
(close twice, context manager, a worker failure)."""

import os
import subprocess
import sys

import numpy as np
import pytest

import einsummable as es
from conftest import attention, close_enough, merge_heads, rmsnorm, rope, silu, split_heads

# ---- the FFN of the paper's section 2 --------------------------------------
TOK, DM, DF = 48, 32, 64


def build_ffn(dtype="f32"):
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([TOK, DM], dtype), name="x")
    w1 = g.insertTensor(es.tensorDesc([DM, DF], dtype), name="w1")
    w2 = g.insertTensor(es.tensorDesc([DF, DM], dtype), name="w2")
    act = g.matmul(x, w1)
    hidden = g.unary(act, "relu", 0.0)
    y = g.matmul(hidden, w2, name="y")
    g.save(y)
    return g, x, w1, w2, y


def ffn_ref(x, w1, w2):
    x, w1, w2 = (a.astype(np.float64) for a in (x, w1, w2))
    return np.maximum(x @ w1, 0.0) @ w2


@pytest.mark.parametrize("ndev", [1, 2, 4])
@pytest.mark.parametrize("mode", ["naive", "ai"])
def test_ffn(ndev, mode, rng):
    g, x, w1, w2, y = build_ffn()
    with es.compileGraph(g, device=list(range(ndev)), schedule_mode=mode) as prog:
        assert prog.ndevices == ndev
        W1 = rng.standard_normal((DM, DF)).astype(np.float32) / 4
        W2 = rng.standard_normal((DF, DM)).astype(np.float32) / 4
        prog.load(w1, W1)
        prog.load("w2", W2)           # by name works too
        for it in range(3):           # new x each time; weights stay resident
            X = rng.standard_normal((TOK, DM)).astype(np.float32)
            prog.load(x, X)
            prog.execute()
            Y = prog.offload(y)
            assert Y.shape == (TOK, DM) and Y.dtype == np.float32
            bad = close_enough(Y, ffn_ref(X, W1, W2))
            assert bad is None, "P=%d %s run %d: %s" % (ndev, mode, it, bad)
        W1 = -W1                      # new weights too
        prog.load(w1, W1)
        prog.execute()
        assert close_enough(prog.offload(y), ffn_ref(X, W1, W2)) is None


def test_ffn_f16_and_bf16(rng):
    X = rng.standard_normal((TOK, DM)).astype(np.float32)
    W1 = (rng.standard_normal((DM, DF)) / 4).astype(np.float32)
    W2 = (rng.standard_normal((DF, DM)) / 4).astype(np.float32)
    # f16: NumPy float16 in and out.
    g, x, w1, w2, y = build_ffn("f16")
    with es.compileGraph(g, device=[0, 1]) as prog:
        for t, a in ((x, X), (w1, W1), (w2, W2)):
            prog.load(t, a.astype(np.float16))
        prog.execute()
        Y = prog.offload(y)
        assert Y.dtype == np.float16
        want = ffn_ref(*(a.astype(np.float16) for a in (X, W1, W2)))
        assert close_enough(Y, want, rel=1e-2, abs_=1e-2) is None
        with pytest.raises(es.EinError) as e:
            prog.load(x, X)                      # float32 for an f16 input
        assert e.value.code == es.EIN_ESHAPE and "astype(numpy.float16)" in e.value.message
    # bf16: float32 in (rounded), float32 out; uint16 bit patterns with raw=True.
    g, x, w1, w2, y = build_ffn("bf16")
    with es.compileGraph(g, device=[0, 1]) as prog:
        prog.load(x, X)
        prog.load(w1, W1)
        bits = (W2.view(np.uint32) >> 16).astype(np.uint16)   # truncated: exact bf16 values
        prog.load(w2, bits)
        prog.execute()
        Y = prog.offload(y)
        assert Y.dtype == np.float32
        raw = prog.offload(y, raw=True)
        assert raw.dtype == np.uint16
        assert np.array_equal((raw.astype(np.uint32) << 16).view(np.float32), Y)
        W2b = (bits.astype(np.uint32) << 16).view(np.float32)
        assert close_enough(Y, ffn_ref(X, W1, W2b), rel=3e-2, abs_=3e-2) is None


def test_gelu_exact(rng):
    """The exact (erf) GELU of the operator registry, on 2 devices, against
    NumPy in float64."""
    import math
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([TOK, DM]), name="x")
    y = g.unary(x, "gelu_exact", name="y")
    g.save(y)
    with es.compileGraph(g, device=[0, 1]) as prog:
        X = (rng.standard_normal((TOK, DM)) * 3).astype(np.float32)
        prog.load(x, X)
        prog.execute()
        X64 = X.astype(np.float64)
        want = 0.5 * X64 * (1.0 + np.vectorize(math.erf)(X64 / math.sqrt(2.0)))
        assert close_enough(prog.offload(y), want) is None


# ---- a LLaMA block (examples/llama_block.ein, small) ------------------------
L_T, L_DM, L_HQ, L_HKV, L_HD, L_DF = 32, 128, 4, 2, 32, 192
L_SEQS = [5, 9, 8, 10]
THETA, EPS = 10000.0, 1e-5


def build_llama():
    g = es.createGraph()
    d = lambda *s: es.tensorDesc(list(s), "f32")  # noqa: E731
    x = g.insertTensor(d(L_T, L_DM), name="x")
    w = {}
    for name, shape in (("attn_norm", (L_DM,)), ("wq", (L_DM, L_HQ * L_HD)),
                        ("wk", (L_DM, L_HKV * L_HD)), ("wv", (L_DM, L_HKV * L_HD)),
                        ("wo", (L_HQ * L_HD, L_DM)), ("ffn_norm", (L_DM,)),
                        ("w1", (L_DM, L_DF)), ("w3", (L_DM, L_DF)), ("w2", (L_DF, L_DM))):
        w[name] = g.insertTensor(d(*shape), name=name)
    xn = g.rmsnorm(x, w["attn_norm"], EPS, name="xn")
    q = g.matmul(xn, w["wq"], name="q")
    k = g.matmul(xn, w["wk"], name="k")
    v = g.matmul(xn, w["wv"], name="v")
    qr = g.rope(q, L_HD, THETA, seqs=L_SEQS, name="qr")
    kr = g.rope(k, L_HD, THETA, seqs=L_SEQS, name="kr")
    qh, kh, vh = g.split_heads(qr, L_HD), g.split_heads(kr, L_HD), g.split_heads(v, L_HD)
    att = g.attention(qh, kh, vh, seqs=L_SEQS, name="att")
    o = g.matmul(g.merge_heads(att), w["wo"], name="o")
    h = g.binary(x, o, "add", name="h")
    hn = g.rmsnorm(h, w["ffn_norm"], EPS, name="hn")
    g1 = g.matmul(hn, w["w1"], name="g1")
    g3 = g.matmul(hn, w["w3"], name="g3")
    ff = g.binary(g.unary(g1, "silu"), g3, "mul", name="ff")
    y = g.binary(h, g.matmul(ff, w["w2"]), "add", name="y")
    g.save(y)
    return g, x, w, y


def llama_ref(X, W):
    X = X.astype(np.float64)
    W = {k: v.astype(np.float64) for k, v in W.items()}
    xn = rmsnorm(X, W["attn_norm"], EPS)
    q = rope(xn @ W["wq"], L_HD, THETA, L_SEQS)
    k = rope(xn @ W["wk"], L_HD, THETA, L_SEQS)
    v = xn @ W["wv"]
    att = attention(split_heads(q, L_HD), split_heads(k, L_HD), split_heads(v, L_HD), L_SEQS)
    h = X + merge_heads(att) @ W["wo"]
    hn = rmsnorm(h, W["ffn_norm"], EPS)
    return h + (silu(hn @ W["w1"]) * (hn @ W["w3"])) @ W["w2"]


def llama_weights(rng, scale=1.0):
    W = {}
    for name, shape in (("attn_norm", (L_DM,)), ("wq", (L_DM, L_HQ * L_HD)),
                        ("wk", (L_DM, L_HKV * L_HD)), ("wv", (L_DM, L_HKV * L_HD)),
                        ("wo", (L_HQ * L_HD, L_DM)), ("ffn_norm", (L_DM,)),
                        ("w1", (L_DM, L_DF)), ("w3", (L_DM, L_DF)), ("w2", (L_DF, L_DM))):
        s = 1.0 if len(shape) == 1 else scale / np.sqrt(shape[0])
        W[name] = (rng.standard_normal(shape) * s).astype(np.float32)
    return W


@pytest.mark.parametrize("ndev,mode", [(1, "naive"), (2, "ai"), (4, "ai"), (4, "naive")])
def test_llama_block(ndev, mode, rng):
    g, x, w, y = build_llama()
    with es.compileGraph(g, device=list(range(ndev)), schedule_mode=mode) as prog:
        W = llama_weights(rng)
        for name, a in W.items():
            prog.load(w[name], a)
        for it in range(3):
            X = rng.standard_normal((L_T, L_DM)).astype(np.float32)
            prog.load(x, X)
            prog.execute()
            bad = close_enough(prog.offload(y), llama_ref(X, W))
            assert bad is None, "P=%d %s run %d: %s" % (ndev, mode, it, bad)
        W["wk"] = W["wk"] * 2.0                      # one weight changes
        prog.load("wk", W["wk"])
        prog.execute()
        assert close_enough(prog.offload(y), llama_ref(X, W)) is None


# ---- inspection --------------------------------------------------------------
def test_explain_and_determinism():
    texts = []
    for _ in range(2):
        g, *_ = build_llama()
        with es.compileGraph(g, device=[0, 1, 2, 3], schedule_mode="ai") as prog:
            texts.append(prog.explain())
            ex = prog.exchanges()
            name, descr = prog.topology()
            total, ops = prog.plan()
    assert texts[0] == texts[1], "same graph and options compiled differently"
    for op in ("xn", "att", "g1", "y"):
        assert op in texts[0]
    assert ex and all(body for _, _, body in ex)
    assert name
    assert total > 0 and any(o["name"] == "att" for o in ops)
    assert prog.inputs()["wq"] == ((L_DM, L_HQ * L_HD), "f32")
    assert list(prog.outputs()) == ["y"]


def test_cpu_notice_once():
    """Without a GPU (or without backend='cuda'), device=[0, 1, 2, 3] runs
    four CPU devices and says so once on stderr."""
    code = ("import einsummable as es\n"
            "g = es.createGraph()\n"
            "a = g.insertTensor(es.tensorDesc([8, 8]), name='a')\n"
            "g.save(g.unary(a, 'relu'))\n"
            "for _ in range(2):\n"
            "    es.compileGraph(g, device=[0, 1, 2, 3]).close()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    lines = [s for s in r.stderr.splitlines() if "CPU device" in s]
    assert len(lines) == 1, r.stderr
    assert "running 4 CPU devices for device=[0, 1, 2, 3]" in lines[0]


def _backend_run(code, visible):
    env = dict(os.environ, EIN_GPU_VISIBLE=visible)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env)


_BACKEND_CODE = ("import einsummable as es\n"
                 "g = es.createGraph()\n"
                 "a = g.insertTensor(es.tensorDesc([8, 8]), name='a')\n"
                 "g.save(g.unary(a, 'relu'))\n"
                 "kw = dict(%s)\n"
                 "p = es.compileGraph(g, device=[0, 1], topology='host', **kw)\n"
                 "print('backend', p.backend)\n"
                 "p.close()\n")


def test_backend_default_follows_the_gpus():
    """device=[0, 1] without backend=: the CUDA backend where a CUDA build
    sees GPUs ($EIN_GPU_VISIBLE=1 stands in for them), else CPU devices
    and one line saying why; backend='cpu' forces CPU devices silently;
    backend='cuda' without a GPU raises EIN_EDEVICE; a bad
    $EIN_GPU_VISIBLE is refused by name."""
    r = _backend_run(_BACKEND_CODE % "", "0")
    assert r.returncode == 0, r.stderr
    assert "backend cpu" in r.stdout
    assert "einsummable: no GPU visible; running 2 CPU devices for device=[0, 1]" in r.stderr
    r = _backend_run(_BACKEND_CODE % "", "1")
    cuda_build = any(os.access(os.path.join(d, "einworker-cuda"), os.X_OK)
                     for d in es._lib.bin_dirs())
    assert r.returncode == 0, r.stderr
    if cuda_build:
        assert "backend cuda" in r.stdout, r.stdout + r.stderr
        assert "CPU device" not in r.stderr
    else:
        assert "backend cpu" in r.stdout
        assert "built without CUDA; running 2 CPU devices" in r.stderr
    r = _backend_run(_BACKEND_CODE % "backend='cpu'", "1")
    assert r.returncode == 0 and "backend cpu" in r.stdout, r.stderr
    assert "CPU device" not in r.stderr
    r = _backend_run(_BACKEND_CODE % "backend='cuda'", "0")
    assert r.returncode != 0 and "backend='cuda': no GPU visible" in r.stderr, r.stderr
    r = _backend_run(_BACKEND_CODE % "", "maybe")
    assert r.returncode != 0
    assert "$EIN_GPU_VISIBLE 'maybe': expected 0 or 1" in r.stderr, r.stderr


# ---- loading and offloading errors --------------------------------------------
@pytest.fixture
def ffn_prog():
    g, x, w1, w2, y = build_ffn()
    prog = es.compileGraph(g, device=[0, 1])
    yield prog, (x, w1, w2, y), g
    prog.close()


def test_load_errors(ffn_prog, tmp_path):
    prog, (x, w1, w2, y), g = ffn_prog
    cases = [
        (lambda: prog.load(x, np.zeros((TOK, DM + 1), np.float32)), es.EIN_ESHAPE, "shape"),
        (lambda: prog.load(x, np.zeros((TOK, DM), np.float64)), es.EIN_ESHAPE, "float64"),
        (lambda: prog.load(x, np.zeros((TOK, DM), np.int32)), es.EIN_ESHAPE, "int32"),
        (lambda: prog.load(x, [[0.0] * DM] * TOK), es.EIN_EINVAL, "ndarray"),
        (lambda: prog.load("nope", np.zeros(3, np.float32)), es.EIN_EINVAL, "nope"),
        (lambda: prog.load(y, np.zeros((TOK, DM), np.float32)), es.EIN_EINVAL, "not an input"),
        (lambda: prog.load(42, np.zeros(1)), es.EIN_EINVAL, "42"),
        (lambda: prog.offload(x), es.EIN_EINVAL, "not saved"),
        (lambda: prog.offload("nope"), es.EIN_EINVAL, "nope"),
        (lambda: prog.offload(y), es.EIN_EINVAL, "execute"),     # nothing ran yet
    ]
    for call, code, words in cases:
        with pytest.raises(es.EinError) as e:
            call()
        assert e.value.code == code, e.value.message
        assert words in e.value.message, e.value.message
    # A .npy file with the wrong shape: the library checks it when loaded.
    p = tmp_path / "bad.npy"
    np.save(p, np.zeros((3, 3), np.float32))
    with pytest.raises(es.EinError) as e:
        prog.load(x, str(p))
    assert e.value.code == es.EIN_ESHAPE
    # After all these the program still runs and gives the right answer.
    X = np.ones((TOK, DM), np.float32)
    W1 = np.full((DM, DF), 0.5, np.float32)
    W2 = np.full((DF, DM), 0.25, np.float32)
    np.save(tmp_path / "x.npy", X)
    prog.load(x, str(tmp_path / "x.npy"))          # from a .npy file
    prog.load(w1, W1)
    prog.load(w2, np.asfortranarray(W2))           # any layout, copied to C order
    prog.execute()
    assert close_enough(prog.offload(y), ffn_ref(X, W1, W2)) is None


def test_non_contiguous_and_byte_order(ffn_prog, rng):
    prog, (x, w1, w2, y), _ = ffn_prog
    big = rng.standard_normal((TOK, 2 * DM)).astype(np.float32)
    X = big[:, ::2]                                  # a strided view
    W1 = rng.standard_normal((DM, DF)).astype(np.float32)
    W2 = rng.standard_normal((DF, DM)).astype(">f4")  # big-endian
    prog.load(x, X)
    prog.load(w1, W1)
    prog.load(w2, W2)
    prog.execute()
    assert close_enough(prog.offload(y), ffn_ref(X, W1, W2.astype(np.float32))) is None


# ---- the program's life ------------------------------------------------------
def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_close_twice_and_use_after_close():
    g, x, w1, w2, y = build_ffn()
    prog = es.compileGraph(g, device=[0, 1, 2])
    prog.execute()                                   # generated inputs
    pids = [prog.last_pids[d] for d in range(3)]
    assert all(_alive(p) for p in pids)
    prog.close()
    prog.close()                                     # harmless
    assert not any(_alive(p) for p in pids), "workers left after close()"
    for call in (prog.execute, lambda: prog.offload(y), prog.explain,
                 lambda: prog.load(x, np.zeros((TOK, DM), np.float32))):
        with pytest.raises(es.EinError) as e:
            call()
        assert "closed" in e.value.message
    with es.compileGraph(g, device=[0, 1]) as p2:
        p2.execute()
        pids = list(p2.last_pids)
    assert not any(_alive(p) for p in pids), "workers left after the with block"
    p2.close()                                       # after the with block: harmless


def test_worker_failure(monkeypatch):
    """EIN_FAULT (einworker --help) crashes device 1 in its third
    instruction: execute() raises with the one-line report, the program is
    then unusable but close() is harmless, and no worker is left."""
    g, x, w1, w2, y = build_ffn()
    monkeypatch.setenv("EIN_FAULT", "1:crash:3")
    monkeypatch.setenv("ASAN_OPTIONS", os.environ.get("ASAN_OPTIONS", "") + ":handle_segv=0")
    prog = es.compileGraph(g, device=[0, 1, 2], worker_timeout=10)
    try:
        with pytest.raises(es.EinError) as e:
            prog.execute()
        assert e.value.code == es.EIN_EWORKER, e.value.message
        assert "device 1" in e.value.message and "signal 11" in e.value.message
        assert "\n" not in e.value.message.strip()
        with pytest.raises(es.EinError) as e2:
            prog.execute()
        assert "failure" in e2.value.message
        with pytest.raises(es.EinError):
            prog.offload(y)
    finally:
        prog.close()
        prog.close()
    # A new program in the same process works again.
    monkeypatch.delenv("EIN_FAULT")
    with es.compileGraph(g, device=[0, 1]) as p2:
        X = np.ones((TOK, DM), np.float32)
        p2.load(x, X)
        p2.load(w1, np.eye(DM, DF, dtype=np.float32))
        p2.load(w2, np.eye(DF, DM, dtype=np.float32))
        p2.execute()
        assert close_enough(p2.offload(y), X.astype(np.float64)) is None


def _write_safetensors(path, tensors):
    """A .safetensors file written here with json and NumPy only (not with
    our writer): 8-byte header length, JSON header, the data in order."""
    import json
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        b = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def test_load_safetensors(rng, tmp_path):
    g, x, w1, w2, y = build_ffn()
    W1 = rng.standard_normal((DM, DF)).astype(np.float32) / 4
    W2 = rng.standard_normal((DF, DM)).astype(np.float32) / 4
    st = tmp_path / "m.safetensors"
    _write_safetensors(st, {"w1": W1, "layers.0.w2": W2})
    with es.compileGraph(g, device=[0, 1], schedule_mode="ai") as prog:
        # w1 binds by name, w2 through the mapping
        assert prog.load_safetensors(st, {"w2": "layers.0.w2"}) == 2
        X = rng.standard_normal((TOK, DM)).astype(np.float32)
        prog.load(x, X)
        prog.execute()
        assert close_enough(prog.offload(y), ffn_ref(X, W1, W2)) is None
        with pytest.raises(es.EinError) as e:
            prog.load_safetensors(st, {"w2": "nope"})
        assert "nope" in str(e.value)


# ---- a one-device run's memory: private, advised for huge pages (issue 36) --

def _worker_maps(per_worker=False):
    """(shared-memory segment mappings, kB of anonymous (private) mappings
    advised MADV_HUGEPAGE, AnonHugePages kB) of this process's einworker
    children, from /proc (Linux); per_worker: a list of such triples, one
    per worker."""
    import re
    if per_worker:
        return [_worker_maps_of(d) for d in _workers()]
    segs, advised, huge = [], 0, 0
    for d in _workers():
        s, a, h = _worker_maps_of(d)
        segs += s
        advised += a
        huge += h
    return segs, advised, huge


def _workers():
    """The /proc entries of this process's einworker children."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
            if st[st.find("(") + 1:st.rfind(")")] == "einworker" and \
                    int(st[st.rfind(")") + 2:].split()[1]) == os.getpid():
                out.append(d)
        except (OSError, ValueError, IndexError):
            continue
    return out


def _worker_maps_of(d):
    import re
    segs, advised, huge = [], 0, 0
    try:
        with open("/proc/%s/smaps" % d) as f:
            size, anon = 0, False
            for ln in f:
                if re.match(r"[0-9a-f]+-[0-9a-f]+ ", ln):
                    size = 0
                    anon = len(ln.split()) < 6      # no path: anonymous memory
                    if re.search(r"/dev/shm/ein-.*-\d+( \(deleted\))?$", ln.strip()):
                        segs.append(ln.strip())
                elif ln.startswith("Size:"):
                    size = int(ln.split()[1])
                elif ln.startswith("AnonHugePages:"):
                    huge += int(ln.split()[1])
                elif ln.startswith("VmFlags:") and " hg" in " " + ln[8:] and anon:
                    advised += size
    except (OSError, ValueError, IndexError):
        pass
    return segs, advised, huge


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="needs Linux /proc")
@pytest.mark.parametrize("knob", [None, "0"])
def test_one_device_segment(knob, rng, monkeypatch):
    """One CPU device keeps its memory in private memory advised for
    transparent huge pages (a decode step reads its weights faster from
    them); EIN_HUGEPAGES=0 keeps it in shared memory, as runs of several
    devices do. Either way the product is NumPy's."""
    if knob is None:
        monkeypatch.delenv("EIN_HUGEPAGES", raising=False)
    else:
        monkeypatch.setenv("EIN_HUGEPAGES", knob)
    K, N = 1024, 2048                     # an 8 MiB weight: several 2 MiB pages
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([1, K]), name="x")
    w = g.insertTensor(es.tensorDesc([N, K]), name="w")
    y = g.einsum("ij,kj->ik", x, w, name="y")
    g.save(y)
    with es.compileGraph(g, device=[0]) as prog:
        W = rng.standard_normal((N, K)).astype(np.float32)
        X = rng.standard_normal((1, K)).astype(np.float32)
        prog.load(w, W)
        prog.load(x, X)
        prog.execute()
        bad = close_enough(prog.offload(y), X.astype(np.float64) @ W.astype(np.float64).T)
        assert bad is None, bad
        segs, advised, huge = _worker_maps()
    if knob == "0":
        assert len(segs) == 1, "EIN_HUGEPAGES=0: one shared-memory segment, got %r" % segs
        return
    assert segs == [], "one device: no shared-memory segment, got %r" % segs
    # the advice is the worker's part (deterministic); whether the kernel
    # then finds free 2 MiB pages is the machine's (AnonHugePages, not
    # asserted: THP may be off, or memory fragmented)
    assert advised >= K * N * 4 // 1024, \
        "the segment is not advised MADV_HUGEPAGE (%d kB advised, %d kB huge)" % (advised, huge)


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="needs Linux /proc")
def test_two_device_segments(rng, monkeypatch):
    """Two CPU devices: each worker keeps its segment (the weight's share
    included) in private memory advised for huge pages, and gives its peer
    only what the peer copies, through shared memory; the product is
    NumPy's and the same bytes as with EIN_HUGEPAGES=0 (every segment in
    shared memory, no private memory advised)."""
    K, N, T = 1024, 2048, 64              # an 8 MiB weight; 512 KiB of output
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([T, K]), name="x")
    w = g.insertTensor(es.tensorDesc([N, K]), name="w")
    y = g.einsum("ij,kj->ik", x, w, name="y")
    z = g.einsum("ik,kj->ij", y, w, name="z")   # reads y across devices
    g.save(y)
    g.save(z)
    W = (rng.standard_normal((N, K)) / 32).astype(np.float32)
    X = rng.standard_normal((T, K)).astype(np.float32)
    got = {}
    for knob in (None, "0"):
        if knob is None:
            monkeypatch.delenv("EIN_HUGEPAGES", raising=False)
        else:
            monkeypatch.setenv("EIN_HUGEPAGES", knob)
        with es.compileGraph(g, device=[0, 1]) as prog:
            prog.load(w, W)
            prog.load(x, X)
            prog.execute()
            got[knob] = (prog.offload(y), prog.offload(z))
            maps = _worker_maps(per_worker=True)
        assert len(maps) == 2, maps
        # each maps its own shared memory; a worker that copied from its
        # peer maps the peer's too (the program exchanges y)
        assert sum(len(m[0]) for m in maps) >= 3, maps
        for segs, advised, huge in maps:
            # its own shared memory and its peer's
            assert len(segs) >= 1, "a worker of two maps no shared memory: %r" % segs
            if knob is None:
                assert advised >= K * N * 4 // 4 // 1024, \
                    "a worker's private memory advised MADV_HUGEPAGE: %d kB" % advised
            else:
                assert advised == 0, "EIN_HUGEPAGES=0: %d kB of private memory advised" % advised
    Y = X.astype(np.float64) @ W.astype(np.float64).T
    assert close_enough(got[None][0], Y) is None
    assert close_enough(got[None][1], Y @ W.astype(np.float64)) is None
    for a, b in zip(got[None], got["0"]):
        assert a.tobytes() == b.tobytes(), "EIN_HUGEPAGES=0 gives other bytes"
