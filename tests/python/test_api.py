"""tests/python/test_api.py — the Pythonic surface of the package:
exception classes, the @ operator, rope styles, schedule-mode vocabulary,
device= checks, repr, run statistics, trace, predict(), version and
docstrings."""

import ast
import inspect
import json
import os
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest

import einsummable as es
from einsummable import _errors

from conftest import close_enough, positions

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("EIN_SRCDIR") or os.path.dirname(os.path.dirname(HERE))


def small_ffn(tokens=16, d_model=8, d_ff=12):
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([tokens, d_model]), name="x")
    w1 = g.insertTensor(es.tensorDesc([d_model, d_ff]), name="w1")
    w2 = g.insertTensor(es.tensorDesc([d_ff, d_model]), name="w2")
    y = g.matmul(g.relu(x @ w1), w2, name="y")
    g.save(y)
    return g, x, w1, w2, y


# ---- exceptions ------------------------------------------------------------
CODES = {
    es.EIN_EINVAL: (es.EinValueError, ValueError), es.EIN_ESHAPE: (es.EinShapeError, ValueError),
    es.EIN_EPARSE: (es.EinParseError, ValueError), es.EIN_ELIMIT: (es.EinLimitError, ValueError),
    es.EIN_ENOPLAN: (es.EinNoPlanError, ValueError), es.EIN_EIO: (es.EinIOError, OSError),
    es.EIN_ENOMEM: (es.EinMemoryError, MemoryError),
    es.EIN_EPROTO: (es.EinRuntimeError, RuntimeError),
    es.EIN_EDEVICE: (es.EinRuntimeError, RuntimeError),
    es.EIN_EUNSUPPORTED: (es.EinUnsupportedError, NotImplementedError),
    es.EIN_EWORKER: (es.WorkerError, RuntimeError),
    es.EIN_ETIMEOUT: (es.EinTimeoutError, RuntimeError),
}


@pytest.mark.parametrize("code", sorted(CODES))
def test_each_code_is_its_own_class_and_a_builtin_exception(code):
    cls, builtin = CODES[code]
    e = es.EinError(code, "what went wrong")
    assert type(e) is cls and isinstance(e, builtin) and isinstance(e, es.EinError)
    assert (e.code, e.message, str(e)) == (code, "what went wrong", "what went wrong")
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is cls and again.code == code and again.message == e.message
    with pytest.raises(builtin):
        raise e


def test_every_exception_is_exported():
    for name in _errors.ERRORS:
        assert getattr(es, name) is getattr(_errors, name)
        assert name in es.__all__


def test_wrong_python_types_are_type_errors():
    g, x, w1, _, _ = small_ffn()
    with pytest.raises(TypeError, match="expected a Tensor"):
        g.matmul(x, 3)
    with pytest.raises(es.EinTypeError):
        es.tensorDesc(object())
    with pytest.raises(es.EinError) as ei:  # still an EinError with its code
        g.softmax(x, axis=1.5)
    assert ei.value.code == es.EIN_EINVAL and isinstance(ei.value, TypeError)
    with pytest.raises(TypeError, match="createGraph"):
        es.compileGraph("graph")


def test_shape_problems_are_shape_errors():
    g, x, w1, _, _ = small_ffn()
    with pytest.raises(es.EinShapeError) as ei:
        g.matmul(x, x)
    assert ei.value.code == es.EIN_ESHAPE and isinstance(ei.value, ValueError)
    with pytest.raises(ValueError):
        es.tensorDesc([4, 0])


# ---- vocabulary and device= ---------------------------------------------------
def test_device_as_one_number_is_refused_with_the_list_form():
    g = small_ffn()[0]
    with pytest.raises(TypeError) as ei:
        es.compileGraph(g, device=4)
    msg = str(ei.value)
    assert "device=[0, 1, 2, 3]" in msg and "device=[4]" in msg
    with pytest.raises(TypeError):
        es.compileGraph(g, device="0-3")


def test_schedule_mode_search_and_its_alias_ai():
    g = small_ffn()[0]
    texts = []
    for mode in ("search", "ai"):
        with es.compileGraph(g, device=[0, 1], schedule_mode=mode) as p:
            assert p.schedule_mode == "search"
            texts.append(p.explain())
    assert texts[0] == texts[1]
    with pytest.raises(ValueError, match="'naive' or 'search'"):
        es.compileGraph(g, device=[0, 1], schedule_mode="fast")


def test_partials_native_and_f32(rng):
    # A bf16 contraction: native partials (half the bytes) stay within
    # bf16 tolerance of f32 partials; another word is refused.
    g = es.createGraph()
    a = g.insertTensor(es.tensorDesc([4, 512], "bf16"), name="a")
    b = g.insertTensor(es.tensorDesc([512, 4], "bf16"), name="b")
    y = a @ b
    g.save(y)
    va, vb = rng.uniform(-1, 1, (4, 512)), rng.uniform(-1, 1, (512, 4))
    got = {}
    for mode in ("f32", "native"):
        with es.compileGraph(g, device=[0, 1], partials=mode) as p:
            p.load(a, va.astype(np.float32))
            p.load(b, vb.astype(np.float32))
            p.execute()
            got[mode] = np.asarray(p.offload(y), dtype=np.float64)
    mag = np.abs(va) @ np.abs(vb)
    assert np.all(np.abs(got["native"] - got["f32"]) <= mag / 64)
    with pytest.raises(ValueError, match="'f32' or 'native'"):
        es.compileGraph(g, device=[0, 1], partials="bf16")


# ---- operators ----------------------------------------------------------------
def test_at_and_arithmetic_operators_build_the_graph(rng):
    g = es.createGraph()
    a = g.insertTensor(es.tensorDesc([6, 4]), name="a")
    b = g.insertTensor(es.tensorDesc([4, 5]), name="b")
    c = g.insertTensor(es.tensorDesc([6, 5]), name="c")
    y = ((a @ b) + c) * c - c / (c * c + c)
    g.save(y)
    with pytest.raises(TypeError):
        a @ 2.0
    va, vb = rng.standard_normal((6, 4)), rng.standard_normal((4, 5))
    vc = rng.uniform(1.0, 2.0, (6, 5))
    with es.compileGraph(g, device=[0, 1]) as p:
        for t, v in ((a, va), (b, vb), (c, vc)):
            p.load(t, v.astype(np.float32))
        p.execute()
        got = p.offload(y)
    want = ((va @ vb) + vc) * vc - vc / (vc * vc + vc)
    assert close_enough(got, want) is None


def rope_half(x, head_dim, theta, seqs):
    """Hugging Face's rotate_half: pairs (i, i + head_dim/2) of each head."""
    t, width = x.shape
    half = head_dim // 2
    ang = positions(seqs)[:, None] * theta ** (-2.0 * np.arange(half) / head_dim)
    c, s = np.cos(ang)[:, None], np.sin(ang)[:, None]
    h = x.reshape(t, width // head_dim, head_dim)
    a, b = h[..., :half], h[..., half:]
    return np.concatenate([a * c - b * s, b * c + a * s], axis=-1).reshape(t, width)


@pytest.mark.parametrize("ndev", [1, 2])
def test_rope_half_style_matches_rotate_half(rng, ndev):
    seqs, head_dim, heads, theta = [5, 7], 8, 2, 500.0
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([12, heads * head_dim]), name="x")
    y = g.rope(x, head_dim, theta, seqs=seqs, style="half")
    z = g.rope(x, head_dim, theta, seqs=seqs)  # interleaved, the default
    g.save(y, z)
    v = rng.standard_normal((12, heads * head_dim))
    with es.compileGraph(g, device=list(range(ndev))) as p:
        p.load(x, v.astype(np.float32))
        p.execute()
        got_half, got_inter = p.offload(y), p.offload(z)
    assert close_enough(got_half, rope_half(v, head_dim, theta, seqs)) is None
    assert close_enough(got_half, rope_half(v, head_dim, theta, [12])) is not None
    assert close_enough(got_inter, rope_half(v, head_dim, theta, seqs)) is not None
    with pytest.raises(ValueError, match="'interleaved' or 'half'"):
        g.rope(x, head_dim, style="neox")


# ---- repr, stats, trace, predict ------------------------------------------------
def test_reprs_say_what_things_are():
    g, x, w1, w2, y = small_ffn()
    r = repr(g)
    assert r.startswith("<einsummable.Graph") and "'x'" in r and "'y'" in r
    assert repr(y) == "<einsummable.Tensor y [16, 8] f32>"
    with es.compileGraph(g, device=[0, 1]) as p:
        assert "2 cpu devices" in repr(p)


def test_last_stats_has_every_device(rng):
    g, x, w1, w2, y = small_ffn()
    with es.compileGraph(g, device=[0, 1, 2]) as p:
        assert p.last_stats is None
        p.execute()
        st = p.last_stats
        assert isinstance(st, es.RunStats) and len(st.devices) == 3
        assert [d.pid for d in st.devices] == p.last_pids
        assert st.wall_s == p.last_run_seconds > 0
        for d in st.devices:
            assert d.total >= 0 and d.kernel >= 0 and d.copy >= 0 and d.wait >= 0
        assert "device 2" in str(st)


def test_trace_is_written_at_close(tmp_path):
    g = small_ffn()[0]
    path = tmp_path / "trace.json"
    with es.compileGraph(g, device=[0, 1], trace=path) as p:
        p.execute()
        p.execute()
        pids = p.last_pids
    with open(path) as f:
        doc = json.load(f)
    events = doc if isinstance(doc, list) else doc.get("traceEvents", [])
    assert events, "empty trace"
    assert len({e.get("pid") for e in events if "pid" in e}) >= len(pids)


def test_predict_is_deterministic_and_names_every_device():
    g = small_ffn(64, 32, 48)[0]
    with es.compileGraph(g, device=[0, 1, 2, 3], schedule_mode="search") as p:
        a, b = p.predict(), p.predict()
        assert a == b
        assert isinstance(a, es.Prediction) and len(a.devices) == 4
        assert a.time >= a.makespan > 0
        assert a.calibration
        from einsummable import _lib as L
        import ctypes
        for d in a.devices:
            assert d.compute > 0 and d.idle >= 0
            seg = ctypes.c_uint64()
            L.lib.ein_compiled_program(p._c, d.device, None, None, ctypes.byref(seg))
            assert d.peak_bytes == seg.value > 0
        assert a.peak_bytes == max(d.peak_bytes for d in a.devices)
        assert "predicted iteration" in str(a)
        with pytest.raises(es.EinError):
            p.predict(calibration="no-such-calibration")


def test_memory_limit_bounds_the_predicted_peak():
    # 8 MB of weights on 2 devices of dgx-a100 (GPU figures: a GEMM priced
    # by its FLOPs): the default plan keeps them whole on both; under 6 MB
    # the search must return one that splits them. (On the host topology
    # the calibration's gemm-operands already make the weight split the
    # fastest, so the limit would not bind there.)
    g = small_ffn(64, 512, 2048)[0]
    with es.compileGraph(g, device=[0, 1], schedule_mode="search", topology="dgx-a100") as p:
        assert p.predict().peak_bytes > 6e6
    with es.compileGraph(g, device=[0, 1], schedule_mode="search", memory_limit=6e6,
                         topology="dgx-a100") as p:
        assert 0 < p.predict().peak_bytes <= 6e6
    for bad in (0, -1.0, float("inf"), "6MB", True):
        with pytest.raises(es.EinValueError):
            es.compileGraph(g, device=[0, 1], memory_limit=bad)


# ---- version, docstrings ---------------------------------------------------------
def test_version_is_configure_acs():
    path = os.path.join(SRC, "configure.ac")
    if not os.path.exists(path):
        pytest.skip("no configure.ac at %s" % path)
    with open(path) as f:
        m = re.search(r"AC_INIT\(\[[^]]*\], \[([^]]*)\]", f.read())
    assert m and es.__version__ == m.group(1)


def test_python_m_einsummable_version():
    r = subprocess.run([sys.executable, "-m", "einsummable", "--version"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "einsummable %s" % es.__version__
    r = subprocess.run([sys.executable, "-m", "einsummable", "--bogus"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "usage" in r.stderr


def _public(obj):
    for name, v in inspect.getmembers(obj):
        if name.startswith("_") and name not in ("__init__",):
            continue
        if inspect.isfunction(v) or inspect.ismethod(v) or isinstance(v, property):
            yield name, v


def test_every_public_name_has_a_docstring():
    missing = []
    for name in es.__all__:
        v = getattr(es, name)
        if inspect.isclass(v) or inspect.isfunction(v):
            if not (v.__doc__ or "").strip():
                missing.append(name)
        if inspect.isclass(v):
            for m, f in _public(v):
                if m == "__init__":
                    continue
                if not (inspect.getdoc(f) or "").strip():
                    missing.append("%s.%s" % (name, m))
    assert not missing, "no docstring: " + ", ".join(missing)


def _stub_signatures():
    with open(os.path.join(os.path.dirname(es._core.__file__), "_core.pyi")) as f:
        tree = ast.parse(f.read())
    out = {}

    def params(fn):
        a = fn.args
        return ([p.arg for p in a.posonlyargs + a.args] + (["*" + a.vararg.arg] if a.vararg else [])
                + [p.arg for p in a.kwonlyargs] + (["**" + a.kwarg.arg] if a.kwarg else []))

    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = params(node)
        elif isinstance(node, ast.ClassDef):
            for m in node.body:
                if isinstance(m, ast.FunctionDef):
                    out.setdefault("%s.%s" % (node.name, m.name), params(m))
    return out


def test_type_stub_matches_the_code():
    stub = _stub_signatures()
    checked = 0
    for key, names in stub.items():
        obj = es._core
        for part in key.split("."):
            obj = getattr(obj, part)
        if isinstance(obj, property):
            obj = obj.fget
        sig = inspect.signature(obj)
        real = [("*" if p.kind == p.VAR_POSITIONAL else "**" if p.kind == p.VAR_KEYWORD else "")
                + p.name for p in sig.parameters.values()]
        assert real == names, "%s: code %s, stub %s" % (key, real, names)
        checked += 1
    # Every public function and method of the code is in the stub.
    for cls in (es.Graph, es.Tensor, es.Program, es.TensorDesc):
        for m, _ in _public(cls):
            if m != "__init__" or cls in (es.Graph, es.TensorDesc):
                assert "%s.%s" % (cls.__name__, m) in stub, "%s.%s not in _core.pyi" % (
                    cls.__name__, m)
    for f in ("createGraph", "tensorDesc", "compileGraph", "load_program"):
        assert f in stub
    assert checked > 40


def test_explain_names_splits_in_the_users_dimension_names():
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([64, 32], dim_names=["tokens", "d_model"]), name="x")
    w = g.insertTensor(es.tensorDesc([32, 96], dim_names=["d_model", "d_ff"]), name="w")
    g.save(g.relu(x @ w, name="y"))
    with es.compileGraph(g, device=[0, 1, 2, 3]) as p:
        text = p.explain(exchanges=False)
        _, ops = p.plan()
    assert re.search(r"\btokens:\d", text) and re.search(r"\bd_ff:\d", text), text
    assert all("tokens" in op["split"] for op in ops)
