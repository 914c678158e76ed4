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
