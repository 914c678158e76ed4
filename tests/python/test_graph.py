"""tests/python/test_graph.py — building graphs from Python: types, every
operator of the header, reading tensors back, and the errors a user meets
(bad shapes, wrong dtypes, unknown tensors), raised before anything runs."""

import numpy as np
import pytest

import einsummable as es


def ffn(tokens=16, d_model=8, d_ff=24, dtype="f32"):
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([tokens, d_model], dtype), name="x")
    w1 = g.insertTensor(es.tensorDesc([d_model, d_ff], dtype), name="w1")
    w2 = g.insertTensor(es.tensorDesc([d_ff, d_model], dtype), name="w2")
    act = g.matmul(x, w1, name="act")
    hidden = g.unary(act, "relu", 0.0, name="hidden")
    y = g.matmul(hidden, w2, name="y")
    g.save(y)
    return g, (x, w1, w2, act, hidden, y)


def test_ffn_shapes_and_readback():
    g, (x, w1, w2, act, hidden, y) = ffn()
    assert y.shape == (16, 8) and y.dtype == "f32" and y.name == "y"
    assert act.shape == (16, 24)
    assert [t.name for t in g.tensors()] == ["x", "w1", "w2", "act", "hidden", "y"]
    assert g.tensor("hidden") is hidden
    assert g.tensor("w2").shape == (24, 8)


def test_generated_names_are_unique():
    g = es.createGraph()
    a = g.insertTensor(es.tensorDesc([4, 4]))
    b = g.insertTensor(es.tensorDesc([4, 4]))
    c = g.matmul(a, b)
    assert len({a.name, b.name, c.name}) == 3


@pytest.mark.parametrize("dtype,want", [("f32", "f32"), ("f16", "f16"), ("bf16", "bf16"),
                                        (np.float32, "f32"), (np.float16, "f16"),
                                        (np.dtype("float32"), "f32"), ("float16", "f16")])
def test_dtypes_accepted(dtype, want):
    g = es.createGraph()
    t = g.insertTensor(es.tensorDesc([3, 5], dtype))
    assert t.dtype == want


@pytest.mark.parametrize("dtype", ["f64", np.float64, np.int16, "int8", None])
def test_bad_dtype(dtype):
    with pytest.raises(es.EinError) as e:
        es.tensorDesc([3, 5], dtype)
    assert e.value.code == es.EIN_EINVAL
    assert "dtype" in e.value.message


@pytest.mark.parametrize("shape", [[0, 4], [4, -1], [1] * 9, [], [2.5, 3], "abc", None])
def test_bad_shape(shape):
    with pytest.raises(es.EinError) as e:
        es.tensorDesc(shape, "f32")
    assert e.value.code in (es.EIN_ESHAPE, es.EIN_EINVAL)
    assert "tensorDesc" in str(e.value)


def test_every_operator():
    """One of each operator of the header, with the output types it must
    give (shape inference is the library's: the checks here are NumPy's
    rules for the same operations)."""
    g = es.createGraph()
    T, H, D = 12, 4, 8
    x = g.insertTensor(es.tensorDesc([T, H * D]), name="x")
    w = g.insertTensor(es.tensorDesc([H * D]), name="w")
    b = g.insertTensor(es.tensorDesc([H * D]), name="b")
    kv = g.insertTensor(es.tensorDesc([T, 2 * D]), name="kv")
    m = g.insertTensor(es.tensorDesc([H * D, 6]), name="m")
    assert g.einsum("ij,jk->ik", x, m).shape == (T, 6)
    assert g.einsum("ij->j", x).shape == (H * D,)
    for op in ("relu", "silu", "gelu", "exp", "neg", "sigmoid", "tanh", "square", "gelu_exact"):
        assert g.unary(x, op).shape == (T, H * D)
    assert g.unary(x, "scale", 0.5).shape == (T, H * D)
    assert g.unary(x, "addc", 1.0).shape == (T, H * D)
    for op in ("add", "sub", "mul", "div", "maximum"):
        assert g.binary(x, w, op).shape == (T, H * D)   # broadcasting [T, C] with [C]
    assert g.binary("add", x, x).shape == (T, H * D)      # op first works too
    assert g.add(x, w).shape == (T, H * D)
    assert g.softmax(x, axis=-1).shape == (T, H * D)
    assert g.softmax(x, 0).shape == (T, H * D)
    assert g.rmsnorm(x, w, 1e-5).shape == (T, H * D)
    assert g.layernorm(x, w, b, 1e-5).shape == (T, H * D)
    xr = g.rope(x, D, 10000.0, seqs=[5, 7])
    assert xr.shape == (T, H * D)
    q = g.split_heads(xr, D)
    assert q.shape == (H, T, D)
    k = g.split_heads(kv, D)
    assert k.shape == (2, T, D)
    att = g.attention(q, k, k, seqs=[5, 7])
    assert att.shape == (H, T, D)
    assert g.merge_heads(att).shape == (T, H * D)
    assert g.reduce(x, "sum", 1).shape == (T,)
    assert g.reduce(x, "max", [0]).shape == (H * D,)
    assert g.concat([x, x], axis=1).shape == (T, 2 * H * D)
    assert g.concat([x, x, x], axis=0).shape == (3 * T, H * D)
    assert g.slice(x, 1, 8, 16).shape == (T, 8)


def test_plan_without_running():
    g, _ = ffn(tokens=64, d_model=32, d_ff=64)
    total, ops = g.plan(4)
    assert total > 0
    assert [o["name"] for o in ops] == ["act", "hidden", "y"]
    assert all(o["split"] for o in ops)


def test_matmul_bad_shapes():
    g = es.createGraph()
    a = g.insertTensor(es.tensorDesc([4, 5]), name="a")
    b = g.insertTensor(es.tensorDesc([6, 7]), name="b")
    with pytest.raises(es.EinError) as e:
        g.matmul(a, b)
    assert e.value.code == es.EIN_ESHAPE
    assert "a is [4, 5]" in e.value.message and "b is [6, 7]" in e.value.message


def test_binary_does_not_broadcast():
    g = es.createGraph()
    a = g.insertTensor(es.tensorDesc([4, 5]), name="a")
    b = g.insertTensor(es.tensorDesc([4]), name="b")
    with pytest.raises(es.EinError) as e:
        g.binary(a, b, "add")
    assert e.value.code == es.EIN_ESHAPE and "broadcast" in e.value.message


def test_library_errors_carry_its_message():
    """Checks only the C library makes: its code and message come through."""
    g = es.createGraph()
    q = g.insertTensor(es.tensorDesc([4, 8, 16]), name="q")
    k = g.insertTensor(es.tensorDesc([3, 8, 16]), name="k")
    with pytest.raises(es.EinError) as e:
        g.attention(q, k, k)               # 4 query heads over 3 kv heads
    assert e.value.code < 0 and e.value.message
    x = g.insertTensor(es.tensorDesc([4, 8]), name="x")
    with pytest.raises(es.EinError) as e:
        g.einsum("ij,jk->ik", x, x)        # j is 8 in one, 4 in the other
    assert e.value.code < 0 and e.value.message
    with pytest.raises(es.EinError) as e:
        g.insertTensor(es.tensorDesc([2]), name="x")   # name taken
    assert "x" in e.value.message
    assert [t.name for t in g.tensors()] == ["q", "k", "x"]   # graph unchanged


def test_unknown_tensor_and_foreign_tensor():
    g, _ = ffn()
    with pytest.raises(es.EinError) as e:
        g.tensor("nope")
    assert "nope" in e.value.message
    other = es.createGraph()
    z = other.insertTensor(es.tensorDesc([8, 8]), name="z")
    with pytest.raises(es.EinError) as e:
        g.matmul(g.tensor("x"), z)
    assert "another graph" in e.value.message
    with pytest.raises(es.EinError):
        g.unary(g.tensor("x"), "rleu")
    with pytest.raises(es.EinError):
        g.matmul("x", 3)


@pytest.mark.parametrize("call", [
    lambda g, x: g.softmax(x, axis=2),
    lambda g, x: g.slice(x, 0, 3, 99),
    lambda g, x: g.reduce(x, "mean", 0),
    lambda g, x: g.rope(x, 4, seqs=[3, 3]),       # 6 tokens of 16
    lambda g, x: g.concat([], 0),
])
def test_bad_arguments(call):
    g, (x, *_) = ffn()
    with pytest.raises(es.EinError) as e:
        call(g, x)
    assert e.value.message


def test_save_twice_and_nothing_saved():
    g, (x, *_rest) = ffn()
    y = g.tensor("y")
    with pytest.raises(es.EinError):
        g.save(y)
    h = es.createGraph()
    h.insertTensor(es.tensorDesc([2, 2]))
    with pytest.raises(es.EinError) as e:
        es.compileGraph(h, device=[0])
    assert "save" in e.value.message


@pytest.mark.parametrize("kw", [dict(schedule_mode="fast"), dict(device=[]),
                                dict(device=[-1]), dict(backend="tpu"),
                                dict(device=list(range(65)))])
def test_compile_bad_options(kw):
    g, _ = ffn()
    with pytest.raises(es.EinError):
        es.compileGraph(g, **kw)
