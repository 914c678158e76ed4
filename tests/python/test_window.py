"""tests/python/test_window.py — sliding-window attention (issue 34) through
the Python graph API: Graph.attention(..., window=W) over packed sequences
with grouped-query heads on 1, 2 and 3 CPU devices against a NumPy masked
softmax written here with transformers' rule (key j visible to query i when
i - W < j <= i, within i's sequence); window=0 is full causal attention;
bad windows (negative, not an integer) are refused naming the window, for
attention and decode_attention."""

import numpy as np
import pytest

import einsummable as es
from conftest import close_enough

HQ, HKV, T, D = 4, 2, 40, 8
SEQS = [7, 25, 8]


def windowed(q, k, v, seqs, w):
    hq, t, d = q.shape
    group = hq // k.shape[0]
    seq_of = np.repeat(np.arange(len(seqs)), seqs)
    i = np.arange(t)[:, None]
    j = np.arange(t)[None, :]
    vis = (seq_of[:, None] == seq_of[None, :]) & (j <= i)
    if w > 0:
        vis &= j > i - w          # transformers: masked when i - j >= w
    out = np.empty_like(q)
    for h in range(hq):
        s = np.where(vis, q[h] @ k[h // group].T / np.sqrt(d), -np.inf)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out[h] = (p / p.sum(axis=1, keepdims=True)) @ v[h // group]
    return out


def build(w):
    g = es.createGraph()
    q = g.insertTensor(es.tensorDesc([HQ, T, D]), name="q")
    k = g.insertTensor(es.tensorDesc([HKV, T, D]), name="k")
    v = g.insertTensor(es.tensorDesc([HKV, T, D]), name="v")
    y = g.attention(q, k, v, seqs=SEQS, window=w, name="y")
    g.save(y)
    return g, q, k, v, y


@pytest.mark.parametrize("ndev", [1, 2, 3])
@pytest.mark.parametrize("w", [1, 5, 8, 30, 0])
def test_window(ndev, w, rng):
    g, q, k, v, y = build(w)
    Q = rng.standard_normal((HQ, T, D)).astype(np.float32)
    K = rng.standard_normal((HKV, T, D)).astype(np.float32)
    V = rng.standard_normal((HKV, T, D)).astype(np.float32)
    want = windowed(*(a.astype(np.float64) for a in (Q, K, V)), SEQS, w)
    with es.compileGraph(g, device=list(range(ndev))) as prog:
        prog.load(q, Q)
        prog.load(k, K)
        prog.load(v, V)
        prog.execute()
        got = prog.offload(y)
    assert close_enough(got, want) is None
    if 0 < w < max(SEQS):   # the window changed the result
        full = windowed(*(a.astype(np.float64) for a in (Q, K, V)), SEQS, 0)
        assert close_enough(got, full) is not None


def test_window_refused():
    g = es.createGraph()
    q = g.insertTensor(es.tensorDesc([2, 6, 4]), name="q")
    with pytest.raises(es.EinValueError, match="window -1 is negative"):
        g.attention(q, q, q, window=-1)
    with pytest.raises(es.EinTypeError, match="attention: window must be an integer"):
        g.attention(q, q, q, window=2.5)
    with pytest.raises(es.EinTypeError, match="attention: window must be an integer"):
        g.attention(q, q, q, window=True)
    st = g.state(es.tensorDesc([2, 1, 8, 4]), name="kc")
    x = g.insertTensor(es.tensorDesc([2, 1, 4]), name="x")
    pos = g.insertTensor(es.tensorDesc([1], "i32"), name="pos")
    kw = g.cache_write(st, x, pos)
    with pytest.raises(es.EinValueError, match="decode_attention: window -3 is negative"):
        g.decode_attention(g.insertTensor(es.tensorDesc([2, 1, 4]), name="dq"), kw, kw, pos,
                           window=-3)
    with pytest.raises(es.EinTypeError, match="decode_attention: window must be an integer"):
        g.decode_attention(q, kw, kw, pos, window="4")
