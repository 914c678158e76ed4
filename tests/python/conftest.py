"""tests/python/conftest.py — shared pieces of the Python package's tests:
NumPy references (float64) of the operators the tests use, written from
the operator semantics (kernels/kn_cpu.h), never from the program's output."""

import numpy as np
import pytest


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def positions(seqs):
    """The position of each token within its packed sequence."""
    return np.concatenate([np.arange(n) for n in seqs]).astype(np.float64)


def rope(x, head_dim, theta, seqs):
    """Interleaved pairs (x[2i], x[2i+1]) of each head rotated by
    pos * theta^(-2i/head_dim); positions restart at each sequence."""
    t, width = x.shape
    pos = positions(seqs)[:, None]                        # [T, 1]
    i = np.arange(head_dim // 2, dtype=np.float64)[None]  # [1, hd/2]
    ang = pos * theta ** (-2.0 * i / head_dim)            # [T, hd/2]
    c, s = np.cos(ang), np.sin(ang)
    y = x.reshape(t, width // head_dim, head_dim // 2, 2).copy()
    a, b = y[..., 0].copy(), y[..., 1].copy()
    y[..., 0] = a * c[:, None] - b * s[:, None]
    y[..., 1] = a * s[:, None] + b * c[:, None]
    return y.reshape(t, width)


def split_heads(x, head_dim):
    t, w = x.shape
    return x.reshape(t, w // head_dim, head_dim).transpose(1, 0, 2)


def merge_heads(x):
    h, t, d = x.shape
    return x.transpose(1, 0, 2).reshape(t, h * d)


def attention(q, k, v, seqs):
    """Causal grouped-query attention within each packed sequence:
    q [Hq, T, D], k/v [Hkv, T, D]; query head h uses kv head h // (Hq/Hkv)."""
    hq, t, d = q.shape
    group = hq // k.shape[0]
    seq_of = np.repeat(np.arange(len(seqs)), seqs)
    idx = np.arange(t)
    allowed = (seq_of[:, None] == seq_of[None, :]) & (idx[None, :] <= idx[:, None])
    out = np.empty_like(q)
    for h in range(hq):
        s = q[h] @ k[h // group].T / np.sqrt(d)
        s = np.where(allowed, s, -np.inf)
        s = np.exp(s - s.max(axis=1, keepdims=True))
        out[h] = (s / s.sum(axis=1, keepdims=True)) @ v[h // group]
    return out


def close_enough(got, want, rel=1e-4, abs_=1e-5):
    """|got - want| <= rel * max|want| + abs_ everywhere (NaN fails)."""
    got = np.asarray(got, dtype=np.float64)
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    err = np.abs(got - want)
    ok = err <= rel * scale + abs_
    if not ok.all():
        i = np.unravel_index(np.argmin(ok), ok.shape)
        return "at %s: %r, expected %r (tolerance %.3g)" % (
            tuple(int(j) for j in i), float(got[i]), float(want[i]), rel * scale + abs_)
    return None


@pytest.fixture
def rng():
    return np.random.default_rng(20261202)
