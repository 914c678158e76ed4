"""einsummable._dtypes — element types, from the library's dtype table
(ein_dtype_count / ein_dtype_row, include/einsummable/ein_types.h), read
once at import: Python keeps no list of its own, so a dtype added to
common/ir/ein_dtype.c is known here with its name, code, NumPy storage and
block layout."""

import ctypes

import numpy

from . import _lib as L
from ._errors import EinError
from ._util import _fail

_lib = L.lib


def _read_rows():
    rows = []
    for i in range(_lib.ein_dtype_count()):
        e = L.ein_dtype_entry()
        if _lib.ein_dtype_row(i, ctypes.byref(e)) < 0:
            raise ImportError("einsummable: %s: ein_dtype_row(%d) failed" % (_lib.path, i))
        rows.append(e)
    return rows


def _storage(row):
    """The NumPy dtype of a row's stored bytes: its .npy descr, unsigned
    integers of its size for raw bits (bf16's void descr: no NumPy dtype),
    bytes for a block dtype (no descr)."""
    if not row.npy:
        return numpy.dtype(numpy.uint8)
    nd = numpy.dtype(row.npy.decode())
    return numpy.dtype("<u%d" % row.size) if nd.kind == "V" else nd


_ROWS = _read_rows()
# Our name -> (C enum, NumPy dtype of the stored bytes).
_DTYPES = {r.name.decode(): (i, _storage(r)) for i, r in enumerate(_ROWS)}
_DTYPE_BY_CODE = {v[0]: k for k, v in _DTYPES.items()}
# Bytes per block of the block (quantized) dtypes, and elements per block.
_BLOCK_BYTES = {r.name.decode(): int(r.block_bytes) for r in _ROWS if r.block > 1}
_BLOCK = {r.name.decode(): int(r.block) for r in _ROWS if r.block > 1}
# The element dtypes a NumPy array can hold (name -> its NumPy dtype; bf16
# only through ml_dtypes' bfloat16, by name) and NumPy's names for them.
_NUMPY_OF = {r.name.decode(): numpy.dtype(r.npy.decode()) for r in _ROWS
             if r.npy and numpy.dtype(r.npy.decode()).kind != "V"}
_DTYPE_ALIASES = dict({nd.name: name for name, nd in _NUMPY_OF.items()}, bfloat16="bf16")


def _or_list(names):
    names = list(names)
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)


_ELEM_NAMES = ", ".join(r.name.decode() for r in _ROWS if r.npy)
_NUMPY_NAMES = _or_list(nd.name for nd in _NUMPY_OF.values())
_BLOCK_EXPECTED = _or_list("'%s'" % n for n in _BLOCK_BYTES)


def quantize(array, dtype):
    """The blocks of a float array quantized to 'q8_0' or 'q4_0' (ggml's
    reference quantizers, round to nearest: the bytes of a GGUF of the same
    values) or 'f8e4m3' (an f32 scale max|x| / 448 and 128 e4m3fn bytes per
    block, round to nearest even), as uint8 of shape [..., K / block *
    block bytes]; K, the last dim, must be a multiple of the block (32, or
    128 for f8e4m3)."""
    if dtype not in _BLOCK_BYTES:
        _fail(L.EIN_EINVAL, "quantize: dtype %r; expected %s" % (dtype, _BLOCK_EXPECTED))
    a = numpy.ascontiguousarray(array, dtype=numpy.float32)
    n = _BLOCK[dtype]
    if a.ndim < 1 or a.shape[-1] % n:
        _fail(L.EIN_ESHAPE, "quantize: shape %s; the last dim must be a multiple of %d"
              % (list(a.shape), n))
    out = numpy.empty(a.shape[:-1] + (a.shape[-1] // n * _BLOCK_BYTES[dtype],), numpy.uint8)
    _lib.ein_dtype_from_f32(_DTYPES[dtype][0], a.ctypes.data, out.ctypes.data, a.size)
    return out


def dequantize(blocks, dtype):
    """The float32 values of quantize()'s blocks (uint8 [..., bytes])."""
    if dtype not in _BLOCK_BYTES:
        _fail(L.EIN_EINVAL, "dequantize: dtype %r; expected %s" % (dtype, _BLOCK_EXPECTED))
    b = numpy.ascontiguousarray(blocks, dtype=numpy.uint8)
    if b.ndim < 1 or b.shape[-1] % _BLOCK_BYTES[dtype]:
        _fail(L.EIN_ESHAPE, "dequantize: shape %s is not whole %s blocks" % (list(b.shape), dtype))
    out = numpy.empty(b.shape[:-1] + (b.shape[-1] // _BLOCK_BYTES[dtype] * _BLOCK[dtype],),
                      numpy.float32)
    _lib.ein_dtype_to_f32(_DTYPES[dtype][0], b.ctypes.data, out.ctypes.data, out.size)
    return out


def _dtype_name(dtype, what):
    """A dtype's name ('f32', 'f16', 'bf16', 'i32', 'i64', ...) from a name,
    a NumPy dtype or a scalar type."""
    if isinstance(dtype, str):
        name = _DTYPE_ALIASES.get(dtype, dtype)
        if name in _DTYPES:
            return name
        raise EinError(L.EIN_EINVAL, "%s: unknown dtype '%s'; expected %s or a NumPy %s"
                       % (what, dtype, _ELEM_NAMES, _NUMPY_NAMES))
    try:
        nd = numpy.dtype(dtype)
    except TypeError:
        nd = None
    if nd is not None:
        for name, want in _NUMPY_OF.items():
            if nd == want:
                return name
        if nd.name == "bfloat16":  # ml_dtypes, when a user has it
            return "bf16"
    raise EinError(L.EIN_EINVAL, "%s: unsupported dtype %r; expected %s or a NumPy %s"
                   % (what, dtype, _ELEM_NAMES, _NUMPY_NAMES))


def _bf16_from_f32(a):
    """Round float32 values to bfloat16 bit patterns (nearest, ties to even;
    NaN stays a quiet NaN)."""
    u = numpy.ascontiguousarray(a, dtype=numpy.float32).view(numpy.uint32)
    r = ((u + numpy.uint32(0x7FFF) + ((u >> numpy.uint32(16)) & numpy.uint32(1)))
         >> numpy.uint32(16)).astype(numpy.uint16)
    nan = numpy.isnan(a)
    if nan.any():
        r[nan] = numpy.uint16(0x7FC0)
    return r


def _f32_from_bf16(bits):
    """bfloat16 bit patterns to float32 (exact)."""
    return (bits.astype(numpy.uint32) << numpy.uint32(16)).view(numpy.float32)
