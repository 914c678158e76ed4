"""einsummable._core — graphs, compiled programs and sessions over
libeinsummable (see the package's docstring for the API)."""

import atexit
import ctypes
import os
import signal
import sys
import threading
import warnings
import weakref

import numpy

from . import _lib as L
from . import _stats
from ._errors import EinError, EinTypeError

_lib = L.lib

# ---- dtypes ---------------------------------------------------------------
# Our name -> (C enum, NumPy dtype of the stored bytes).
_DTYPES = {
    "f32": (0, numpy.dtype(numpy.float32)),
    "f16": (1, numpy.dtype(numpy.float16)),
    "bf16": (2, numpy.dtype(numpy.uint16)),  # no NumPy dtype: the bit patterns
    "i32": (3, numpy.dtype(numpy.int32)),
    "i64": (4, numpy.dtype(numpy.int64)),
    # quantized weights (issue 36): ggml's blocks of 32, as raw bytes
    "q8_0": (5, numpy.dtype(numpy.uint8)),
    "q4_0": (6, numpy.dtype(numpy.uint8)),
}
# Bytes per block of 32 elements of a quantized dtype.
_BLOCK_BYTES = {"q8_0": 34, "q4_0": 18}


def quantize(array, dtype):
    """The blocks of a float array quantized to 'q8_0' or 'q4_0' (ggml's
    reference quantizers, round to nearest: the bytes of a GGUF of the same
    values), as uint8 of shape [..., K / 32 * block bytes]; K, the last dim,
    must be a multiple of 32."""
    if dtype not in _BLOCK_BYTES:
        _fail(L.EIN_EINVAL, "quantize: dtype %r; expected 'q8_0' or 'q4_0'" % (dtype,))
    a = numpy.ascontiguousarray(array, dtype=numpy.float32)
    if a.ndim < 1 or a.shape[-1] % 32:
        _fail(L.EIN_ESHAPE, "quantize: shape %s; the last dim must be a multiple of 32"
              % list(a.shape))
    out = numpy.empty(a.shape[:-1] + (a.shape[-1] // 32 * _BLOCK_BYTES[dtype],), numpy.uint8)
    _lib.ein_dtype_from_f32(_DTYPES[dtype][0], a.ctypes.data, out.ctypes.data, a.size)
    return out


def dequantize(blocks, dtype):
    """The float32 values of quantize()'s blocks (uint8 [..., bytes])."""
    if dtype not in _BLOCK_BYTES:
        _fail(L.EIN_EINVAL, "dequantize: dtype %r; expected 'q8_0' or 'q4_0'" % (dtype,))
    b = numpy.ascontiguousarray(blocks, dtype=numpy.uint8)
    if b.ndim < 1 or b.shape[-1] % _BLOCK_BYTES[dtype]:
        _fail(L.EIN_ESHAPE, "dequantize: shape %s is not whole %s blocks" % (list(b.shape), dtype))
    out = numpy.empty(b.shape[:-1] + (b.shape[-1] // _BLOCK_BYTES[dtype] * 32,), numpy.float32)
    _lib.ein_dtype_to_f32(_DTYPES[dtype][0], b.ctypes.data, out.ctypes.data, out.size)
    return out
_DTYPE_BY_CODE = {v[0]: k for k, v in _DTYPES.items()}
_DTYPE_ALIASES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "int32": "i32",
                  "int64": "i64"}


def _dtype_name(dtype, what):
    """'f32' | 'f16' | 'bf16' | 'i32' | 'i64' from a name, a NumPy dtype or a
    scalar type."""
    if isinstance(dtype, str):
        name = _DTYPE_ALIASES.get(dtype, dtype)
        if name in _DTYPES:
            return name
        raise EinError(L.EIN_EINVAL, "%s: unknown dtype '%s'; expected f32, f16, bf16, "
                       "i32, i64 or a NumPy float32, float16, int32 or int64" % (what, dtype))
    try:
        nd = numpy.dtype(dtype)
    except TypeError:
        nd = None
    if nd is not None:
        if nd == numpy.float32:
            return "f32"
        if nd == numpy.float16:
            return "f16"
        if nd == numpy.int32:
            return "i32"
        if nd == numpy.int64:
            return "i64"
        if nd.name == "bfloat16":  # ml_dtypes, when a user has it
            return "bf16"
    raise EinError(L.EIN_EINVAL, "%s: unsupported dtype %r; expected f32, f16, bf16, i32, "
                   "i64 or a NumPy float32, float16, int32 or int64" % (what, dtype))


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


def _fail(code, msg):
    raise EinError(code, msg)


def _fail_type(msg):
    """An argument of the wrong Python type: EinTypeError (a TypeError)."""
    raise EinTypeError(L.EIN_EINVAL, msg)


def _check(rc, err, what=None):
    """Raise the library's error for a negative return code."""
    if rc < 0:
        msg = err.msg.decode("utf-8", "replace") if err is not None else ""
        if not msg:
            s = _lib.ein_strerror(rc)
            msg = (what + ": " if what else "") + (s.decode() if s else "error %d" % rc)
        raise EinError(err.code if err is not None and err.code < 0 else rc, msg)
    return rc


def _name_arg(name):
    if name is None:
        return None
    if not isinstance(name, str):
        _fail_type("name must be a non-empty string, not %r" % (name,))
    if not name:
        _fail(L.EIN_EINVAL, "name must be a non-empty string, not %r" % (name,))
    b = name.encode("utf-8")
    if len(b) > 63:
        _fail(L.EIN_EINVAL, "name '%s' is longer than 63 bytes" % name)
    return b


def _int(v, what):
    if isinstance(v, (bool, numpy.bool_)) or not isinstance(v, (int, numpy.integer)):
        _fail_type("%s must be an integer, not %r" % (what, v))
    return int(v)


def _window(v, what):
    """An attention's sliding window: an integer W >= 0 (0: none); a
    negative one is refused by the library, naming it."""
    w = _int(v, "%s: window" % what)
    if w >= 1 << 62:
        _fail(L.EIN_EINVAL, "%s: window %d is too large" % (what, w))
    return w


def _exchange_chunks(text):
    """$EIN_EXCHANGE_CHUNKS as ein_compile_options.exchange_chunks: auto,
    off or a chunk count K from 1 to 1024 (the library's XP_CHUNKS_MAX)."""
    if text == "auto":
        return -1
    if text == "off":
        return 1
    if text.isdigit() and 1 <= int(text) <= 1024:
        return int(text)
    _fail(L.EIN_EINVAL, "$EIN_EXCHANGE_CHUNKS '%s': expected auto, off or a chunk count "
          "from 1 to 1024" % text[:64])


# ---- tensor descriptions and tensors -------------------------------------
class TensorDesc:
    """A zero-bounded tensor type: shape (a tuple of positive ints, rank
    1..8), dtype ('f32', 'f16', 'bf16', 'i32' or 'i64') and optional dim names."""

    __slots__ = ("shape", "dtype", "dim_names")

    def __init__(self, shape, dtype="f32", dim_names=None):
        if isinstance(shape, (int, numpy.integer)):
            shape = (shape,)
        try:
            shape = tuple(shape)
        except TypeError:
            _fail_type("tensorDesc: shape must be a list of sizes, not %r" % (shape,))
        if not 1 <= len(shape) <= L.EIN_DESC_MAX_RANK:
            _fail(L.EIN_ESHAPE, "tensorDesc: rank %d; expected 1..%d"
                  % (len(shape), L.EIN_DESC_MAX_RANK))
        for i, n in enumerate(shape):
            n = _int(n, "tensorDesc: size %d" % i)
            if n < 1:
                _fail(L.EIN_ESHAPE, "tensorDesc: size %d of %s is %d; sizes must be >= 1"
                      % (i, list(shape), n))
        self.shape = tuple(int(n) for n in shape)
        self.dtype = _dtype_name(dtype, "tensorDesc")
        if dim_names is not None:
            dim_names = tuple(dim_names)
            if len(dim_names) != len(self.shape):
                _fail(L.EIN_EINVAL, "tensorDesc: %d dim names for rank %d"
                      % (len(dim_names), len(self.shape)))
        self.dim_names = dim_names

    def __repr__(self):
        return "tensorDesc(%s, %r)" % (list(self.shape), self.dtype)

    def _c(self, keep):
        d = L.ein_tensor_desc()
        d.rank = len(self.shape)
        for i, n in enumerate(self.shape):
            d.shape[i] = n
        d.dtype = _DTYPES[self.dtype][0]
        if self.dim_names:
            for i, s in enumerate(self.dim_names):
                if s is not None:
                    b = str(s).encode("utf-8")
                    keep.append(b)
                    d.dim_names[i] = b
        return d


def tensorDesc(shape, dtype="f32", dim_names=None):
    """The paper's es.tensorDesc(shape, dtype)."""
    return TensorDesc(shape, dtype, dim_names)


class Tensor:
    """A tensor of a graph: .name, .shape, .dtype ('f32'...), .id. Made by
    Graph's methods, never directly."""

    __slots__ = ("graph", "id", "name", "shape", "dtype", "__weakref__")

    def __init__(self, graph, tid, name, shape, dtype):
        self.graph, self.id, self.name, self.shape, self.dtype = graph, tid, name, shape, dtype

    @property
    def rank(self):
        """The number of axes (len(shape))."""
        return len(self.shape)

    def __repr__(self):
        return "<einsummable.Tensor %s %s %s>" % (self.name, list(self.shape), self.dtype)

    # Operators build the graph: x @ w is graph.matmul(x, w), x + y is
    # graph.add(x, y) (NumPy broadcasting), ... Both sides must be tensors
    # of the same graph.
    def _other(self, other, op):
        if not isinstance(other, Tensor):
            return NotImplemented
        return other

    def __matmul__(self, other):
        """x @ w: graph.matmul(x, w)."""
        o = self._other(other, "@")
        return o if o is NotImplemented else self.graph.matmul(self, o)

    def __add__(self, other):
        """x + y: graph.add(x, y)."""
        o = self._other(other, "+")
        return o if o is NotImplemented else self.graph.add(self, o)

    def __sub__(self, other):
        """x - y: graph.sub(x, y)."""
        o = self._other(other, "-")
        return o if o is NotImplemented else self.graph.sub(self, o)

    def __mul__(self, other):
        """x * y: graph.mul(x, y) (elementwise)."""
        o = self._other(other, "*")
        return o if o is NotImplemented else self.graph.mul(self, o)

    def __truediv__(self, other):
        """x / y: graph.div(x, y)."""
        o = self._other(other, "/")
        return o if o is NotImplemented else self.graph.div(self, o)


_UNARY = ("relu", "silu", "gelu", "exp", "neg", "sigmoid", "tanh", "square", "gelu_exact",
          "scale", "addc")
_BINARY = ("add", "sub", "mul", "div", "maximum")
_ROPE_STYLES = {"interleaved": 0, "half": 1}  # ein_rope_style (ein_types.h)


def _read_tensor(gp, tid):
    """(name, shape, dtype, is_input, is_saved) of tensor tid of graph gp."""
    name = ctypes.c_char_p()
    desc = L.ein_tensor_desc()
    is_in, is_saved = ctypes.c_int(), ctypes.c_int()
    rc = _lib.ein_graph_tensor(gp, tid, ctypes.byref(name), ctypes.byref(desc),
                               ctypes.byref(is_in), ctypes.byref(is_saved))
    if rc < 0:
        _fail(rc, "graph: no tensor %d" % tid)
    shape = tuple(int(desc.shape[i]) for i in range(desc.rank))
    return (name.value.decode("utf-8"), shape, _DTYPE_BY_CODE.get(desc.dtype, "f32"),
            bool(is_in.value), bool(is_saved.value))


class Graph:
    """A graph of abstract operators (es.createGraph()). Each method adds
    one operator and returns its result Tensor; `name` (optional, unique,
    1..63 bytes) names it, otherwise the library makes one ("t17"). Errors
    raise EinError and leave the graph unchanged."""

    def __repr__(self):
        ts = self.tensors() if self._p is not None else []
        ins = [t.name for t in ts if _read_tensor(self._p, t.id)[3]]
        return "<einsummable.Graph: %d tensor%s, inputs %s, saved %s>" % (
            len(ts), "" if len(ts) == 1 else "s", ins,
            [t.name for t in ts if t.id in self._saved])

    def __init__(self):
        p = _lib.ein_graph_create()
        if not p:
            _fail(L.EIN_ENOMEM, "createGraph: out of memory")
        self._p = ctypes.c_void_p(p)
        self._tensors = []  # by id
        self._saved = set()

    def __del__(self):
        p = getattr(self, "_p", None)
        self._p = None
        if p is not None and p.value and _lib is not None:
            _lib.ein_graph_destroy(p)

    # -- helpers
    def _t(self, x, what):
        if isinstance(x, str):
            return self.tensor(x)
        if not isinstance(x, Tensor):
            _fail_type("%s: expected a Tensor of this graph, not %r" % (what, x))
        if x.graph is not self:
            _fail(L.EIN_EINVAL, "%s: tensor %s belongs to another graph" % (what, x.name))
        return x

    def _add(self, tid, err, what):
        if tid < 0:
            _check(tid, err, what)
        name, shape, dtype, _, _ = _read_tensor(self._p, tid)
        t = Tensor(self, tid, name, shape, dtype)
        while len(self._tensors) <= tid:
            self._tensors.append(None)
        self._tensors[tid] = t
        return t

    def _axis(self, x, axis, what, rank=None):
        r = x.rank if rank is None else rank
        axis = _int(axis, what + ": axis")
        if not -r <= axis < r:
            _fail(L.EIN_EINVAL, "%s: axis %d out of range for %s of rank %d"
                  % (what, axis, x.name, r))
        return axis % r

    @staticmethod
    def _seq_ends(seqs, tokens, what):
        if seqs is None:
            return None, 0
        lens = [_int(s, what + ": sequence length") for s in seqs]
        if not lens or any(n < 1 for n in lens):
            _fail(L.EIN_ESHAPE, "%s: seqs must be positive lengths, not %r" % (what, list(seqs)))
        if sum(lens) != tokens:
            _fail(L.EIN_ESHAPE, "%s: the sequences %r sum to %d, not the %d tokens"
                  % (what, lens, sum(lens), tokens))
        ends, e = [], 0
        for n in lens:
            e += n
            ends.append(e)
        return (ctypes.c_int64 * len(ends))(*ends), len(ends)

    # -- reading back
    def tensor(self, name):
        """The tensor called `name` (EinError if none)."""
        if not isinstance(name, str):
            _fail_type("tensor: expected a name, not %r" % (name,))
        err = L.ein_error()
        tid = _lib.ein_graph_find(self._p, name.encode("utf-8"), ctypes.byref(err))
        if tid < 0:
            _check(tid, err, "tensor")
        if tid < len(self._tensors) and self._tensors[tid] is not None:
            return self._tensors[tid]
        return self._add(tid, err, "tensor")

    def tensors(self):
        """Every tensor, in creation order."""
        return [self._tensors[i] if i < len(self._tensors) and self._tensors[i] is not None
                else self._add(i, None, "tensors")
                for i in range(_lib.ein_graph_ntensors(self._p))]

    # -- inputs and outputs
    def insertTensor(self, desc, name=None):
        """A graph input of type `desc` (es.tensorDesc(shape, dtype))."""
        if not isinstance(desc, TensorDesc):
            _fail_type("insertTensor: expected es.tensorDesc(shape, dtype), not %r"
                  % (desc,))
        err, keep = L.ein_error(), []
        tid = _lib.ein_graph_insert_tensor(self._p, _name_arg(name), desc._c(keep),
                                           ctypes.byref(err))
        return self._add(tid, err, "insertTensor")

    def save(self, *tensors):
        """Mark tensors as outputs (each at most once)."""
        if not tensors:
            _fail(L.EIN_EINVAL, "save: no tensor given")
        for x in tensors:
            x = self._t(x, "save")
            err = L.ein_error()
            _check(_lib.ein_graph_save(self._p, x.id, ctypes.byref(err)), err, "save")
            self._saved.add(x.id)

    # -- operators
    def matmul(self, a, b, name=None):
        """a [i, j] x b [j, k] -> [i, k] (also written a @ b)."""
        a, b = self._t(a, "matmul"), self._t(b, "matmul")
        if a.rank != 2 or b.rank != 2 or a.shape[1] != b.shape[0]:
            _fail(L.EIN_ESHAPE, "matmul: %s is %s but %s is %s; expected [i, j] x [j, k]"
                  % (a.name, list(a.shape), b.name, list(b.shape)))
        err = L.ein_error()
        return self._add(_lib.ein_graph_matmul(self._p, _name_arg(name), a.id, b.id,
                                               ctypes.byref(err)), err, "matmul")

    def einsum(self, subscripts, a, b=None, name=None):
        """Explicit subscripts: "bij,bjk->bik" (two operands) or "ij->j"."""
        if not isinstance(subscripts, str):
            _fail_type("einsum: subscripts must be a string like 'ij,jk->ik'")
        a = self._t(a, "einsum")
        bid = -1 if b is None else self._t(b, "einsum").id
        err = L.ein_error()
        return self._add(_lib.ein_graph_einsum(self._p, _name_arg(name), subscripts.encode(),
                                               a.id, bid, ctypes.byref(err)), err, "einsum")

    def unary(self, x, op, c=0.0, name=None):
        """op: relu, silu, gelu (tanh approximation), gelu_exact (erf),
        exp, neg, sigmoid, tanh, square, scale (x*c) or addc (x+c)."""
        x = self._t(x, "unary")
        if op not in _UNARY:
            _fail(L.EIN_EINVAL, "unary: unknown operator %r; expected one of %s"
                  % (op, ", ".join(_UNARY)))
        err = L.ein_error()
        return self._add(_lib.ein_graph_unary(self._p, _name_arg(name), op.encode(), float(c),
                                              x.id, ctypes.byref(err)), err, "unary")

    def binary(self, a, b, op=None, name=None):
        """binary(a, b, op) or binary(op, a, b); op: add, sub, mul, div or
        maximum, with NumPy broadcasting."""
        if isinstance(a, str) and a in _BINARY and op is not None and not isinstance(op, str):
            a, b, op = b, op, a
        if op not in _BINARY:
            _fail(L.EIN_EINVAL, "binary: unknown operator %r; expected one of %s"
                  % (op, ", ".join(_BINARY)))
        a, b = self._t(a, "binary"), self._t(b, "binary")
        try:
            numpy.broadcast_shapes(a.shape, b.shape)
        except ValueError:
            _fail(L.EIN_ESHAPE, "%s: %s %s and %s %s do not broadcast"
                  % (op, a.name, list(a.shape), b.name, list(b.shape)))
        err = L.ein_error()
        return self._add(_lib.ein_graph_binary(self._p, _name_arg(name), op.encode(), a.id,
                                               b.id, ctypes.byref(err)), err, "binary")

    def softmax(self, x, axis=-1, name=None):
        """exp(x) / sum(exp(x)) along `axis` (default: the last)."""
        x = self._t(x, "softmax")
        axis = self._axis(x, axis, "softmax")
        err = L.ein_error()
        return self._add(_lib.ein_graph_softmax(self._p, _name_arg(name), x.id, axis,
                                                ctypes.byref(err)), err, "softmax")

    def rmsnorm(self, x, w, eps=1e-5, name=None):
        """x / sqrt(mean(x^2, last axis) + eps) * w."""
        x, w = self._t(x, "rmsnorm"), self._t(w, "rmsnorm")
        if w.shape != x.shape[-1:]:
            _fail(L.EIN_ESHAPE, "rmsnorm: weight %s is %s; expected [%d] (the last axis of %s)"
                  % (w.name, list(w.shape), x.shape[-1], x.name))
        err = L.ein_error()
        return self._add(_lib.ein_graph_rmsnorm(self._p, _name_arg(name), x.id, w.id,
                                                float(eps), ctypes.byref(err)), err, "rmsnorm")

    def layernorm(self, x, w, b, eps=1e-5, name=None):
        """(x - mean) / sqrt(var + eps) * w + b over the last axis."""
        x, w, b = self._t(x, "layernorm"), self._t(w, "layernorm"), self._t(b, "layernorm")
        for t in (w, b):
            if t.shape != x.shape[-1:]:
                _fail(L.EIN_ESHAPE, "layernorm: %s is %s; expected [%d] (the last axis of %s)"
                      % (t.name, list(t.shape), x.shape[-1], x.name))
        err = L.ein_error()
        return self._add(_lib.ein_graph_layernorm(self._p, _name_arg(name), x.id, w.id, b.id,
                                                  float(eps), ctypes.byref(err)), err,
                         "layernorm")

    def rope(self, x, head_dim, theta=10000.0, seqs=None, name=None, style="interleaved",
             scaling=None):
        """Rotary embedding of x [tokens, heads*head_dim]; positions restart
        at each packed sequence (seqs: their lengths, default one sequence).
        style "interleaved" rotates the pairs (2i, 2i+1) of each head (Meta's
        LLaMA code); "half" the pairs (i, i + head_dim/2), Hugging Face's
        rotate_half, which every transformers checkpoint expects
        (docs/hf-llama.md). scaling: None, or transformers' rope_scaling as
        {"type": "linear", "factor": F} or {"type": "llama3", "factor",
        "low_freq_factor", "high_freq_factor", "original_max_position"}
        (es.llama.read_config's form)."""
        x = self._t(x, "rope")
        if style not in _ROPE_STYLES:
            _fail(L.EIN_EINVAL, "rope: style %r; expected 'interleaved' or 'half'" % (style,))
        ends, n = self._seq_ends(seqs, x.shape[0], "rope")
        err = L.ein_error()
        t = self._add(_lib.ein_graph_rope_ex(self._p, _name_arg(name), x.id,
                                             _int(head_dim, "rope: head_dim"), float(theta),
                                             ends, n, _ROPE_STYLES[style],
                                             ctypes.byref(err)), err, "rope")
        return self._scale(t, scaling, "rope")

    def _scale(self, t, scaling, what):
        """Set rope scaling `scaling` (a dict, or None) on rope tensor t."""
        if scaling is None:
            return t
        types = {"none": 0, "default": 0, "linear": 1, "llama3": 2}
        keys = {"type", "rope_type", "factor", "low_freq_factor", "high_freq_factor",
                "original_max_position", "original_max_position_embeddings"}
        if not isinstance(scaling, dict) or set(scaling) - keys:
            _fail(L.EIN_EINVAL, "%s: scaling %r; expected a dict of %s" % (
                what, scaling, ", ".join(sorted(keys))))
        ty = scaling.get("type", scaling.get("rope_type"))
        if ty not in types:
            _fail(L.EIN_EINVAL, "%s: scaling type %r; expected none, linear or llama3"
                  % (what, ty))
        s = L.ein_rope_scaling()
        s.type = types[ty]

        def num(k, alt=None):
            v = scaling.get(k, scaling.get(alt) if alt else None)
            return 0.0 if v is None else float(v)
        s.factor = num("factor")
        s.low_freq_factor = num("low_freq_factor")
        s.high_freq_factor = num("high_freq_factor")
        s.original_max_position = num("original_max_position",
                                      "original_max_position_embeddings")
        err = L.ein_error()
        _check(_lib.ein_graph_rope_scaling(self._p, t.id, ctypes.byref(s), ctypes.byref(err)),
               err, what)
        return t

    def attention(self, q, k, v, seqs=None, window=0, name=None):
        """Causal grouped-query attention: q [heads_q, tokens, d], k and v
        [heads_kv, tokens, d]; each packed sequence (seqs: lengths) attends
        within itself. window=W >= 1: a sliding window (Mistral's
        sliding_window), query t attends only keys u with t - W < u <= t;
        0: full causal attention."""
        q, k, v = (self._t(t, "attention") for t in (q, k, v))
        w = _window(window, "attention")
        ends, n = self._seq_ends(seqs, q.shape[1] if q.rank == 3 else 0, "attention")
        err = L.ein_error()
        return self._add(_lib.ein_graph_attention_window(self._p, _name_arg(name), q.id, k.id,
                                                         v.id, ends, n, w, ctypes.byref(err)),
                         err, "attention")

    def reduce(self, x, op, axes, name=None):
        """op: "sum" or "max" over `axes` (an int or a list of ints)."""
        x = self._t(x, "reduce")
        if op not in ("sum", "max"):
            _fail(L.EIN_EINVAL, "reduce: unknown operator %r; expected sum or max" % (op,))
        if isinstance(axes, (int, numpy.integer)):
            axes = [axes]
        mask = 0
        for a in axes:
            mask |= 1 << self._axis(x, a, "reduce")
        err = L.ein_error()
        return self._add(_lib.ein_graph_reduce(self._p, _name_arg(name), op.encode(), mask,
                                               x.id, ctypes.byref(err)), err, "reduce")

    def concat(self, xs, axis=0, name=None):
        """The tensors of `xs` one after another along `axis`."""
        xs = [self._t(t, "concat") for t in xs]
        if not xs:
            _fail(L.EIN_EINVAL, "concat: no tensor given")
        axis = self._axis(xs[0], axis, "concat")
        ids = (ctypes.c_int * len(xs))(*[t.id for t in xs])
        err = L.ein_error()
        return self._add(_lib.ein_graph_concat(self._p, _name_arg(name), axis, ids, len(xs),
                                               ctypes.byref(err)), err, "concat")

    def slice(self, x, axis, start, end, name=None):
        """x's elements start..end-1 along `axis`."""
        x = self._t(x, "slice")
        axis = self._axis(x, axis, "slice")
        start, end = _int(start, "slice: start"), _int(end, "slice: end")
        if not 0 <= start < end <= x.shape[axis]:
            _fail(L.EIN_ESHAPE, "slice: [%d, %d) is not inside axis %d of %s (size %d)"
                  % (start, end, axis, x.name, x.shape[axis]))
        err = L.ein_error()
        return self._add(_lib.ein_graph_slice(self._p, _name_arg(name), x.id, axis, start, end,
                                              ctypes.byref(err)), err, "slice")

    def split_heads(self, x, head_dim, name=None):
        """[tokens, heads*head_dim] -> [heads, tokens, head_dim]."""
        x = self._t(x, "split_heads")
        err = L.ein_error()
        return self._add(_lib.ein_graph_split_heads(self._p, _name_arg(name), x.id,
                                                    _int(head_dim, "split_heads: head_dim"),
                                                    ctypes.byref(err)), err, "split_heads")

    def merge_heads(self, x, name=None):
        """[heads, tokens, head_dim] -> [tokens, heads*head_dim]."""
        x = self._t(x, "merge_heads")
        err = L.ein_error()
        return self._add(_lib.ein_graph_merge_heads(self._p, _name_arg(name), x.id,
                                                    ctypes.byref(err)), err, "merge_heads")

    def embedding(self, table, ids, name=None):
        """out[t, :] = table[ids[t], :]: table [rows, dim] (float), ids
        [tokens] (i32 or i64) -> [tokens, dim]."""
        table, ids = self._t(table, "embedding"), self._t(ids, "embedding")
        err = L.ein_error()
        return self._add(_lib.ein_graph_embedding(self._p, _name_arg(name), table.id, ids.id,
                                                  ctypes.byref(err)), err, "embedding")

    # -- generation (docs/generation.md)
    def state(self, desc, name=None):
        """A state tensor (a key/value cache, [heads_kv, batch, len, d], a
        float dtype): kept on the devices by the program's session, zero at
        the start, changed only by its cache_write, run after run (several
        cache_writes of one state need entry points: Program.add_entry)."""
        if not isinstance(desc, TensorDesc):
            _fail_type("state: expected es.tensorDesc(shape, dtype), not %r" % (desc,))
        err, keep = L.ein_error(), []
        tid = _lib.ein_graph_state(self._p, _name_arg(name), desc._c(keep), ctypes.byref(err))
        return self._add(tid, err, "state")

    def cache_write(self, state, x, pos, name=None):
        """The state with x [heads_kv, batch*C, d] (C >= 1 new tokens per
        sequence) written: token t of sequence b at row pos[b] + t (pos
        [batch], i32 or i64, an input of each run); read the result, not
        the state, to see the cache after the write."""
        state, x, pos = (self._t(t, "cache_write") for t in (state, x, pos))
        err = L.ein_error()
        return self._add(_lib.ein_graph_cache_write(self._p, _name_arg(name), state.id, x.id,
                                                    pos.id, ctypes.byref(err)), err,
                         "cache_write")

    def decode_attention(self, q, k, v, pos, window=0, name=None):
        """C >= 1 new tokens per sequence: row b*C + t of q [heads_q,
        batch*C, d] attends to keys and values [0, pos[b] + t] of the caches
        k, v [heads_kv, batch, len, d] (results of cache_write) ->
        [heads_q, batch*C, d]. window=W >= 1: only the keys
        [pos[b] + t - W + 1, pos[b] + t] (as attention's window)."""
        q, k, v, pos = (self._t(t, "decode_attention") for t in (q, k, v, pos))
        w = _window(window, "decode_attention")
        err = L.ein_error()
        return self._add(_lib.ein_graph_decode_attention_window(self._p, _name_arg(name), q.id,
                                                                k.id, v.id, pos.id, w,
                                                                ctypes.byref(err)), err,
                         "decode_attention")

    def rope_at(self, x, pos, head_dim, theta=10000.0, style="interleaved", name=None,
                scaling=None):
        """Rotary embedding of x [tokens, heads*head_dim] with token t at
        position pos[t] (pos [tokens], i32 or i64, an input of each run);
        scaling as rope's."""
        x, pos = self._t(x, "rope_at"), self._t(pos, "rope_at")
        if style not in _ROPE_STYLES:
            _fail(L.EIN_EINVAL, "rope_at: style %r; expected 'interleaved' or 'half'" % (style,))
        err = L.ein_error()
        t = self._add(_lib.ein_graph_rope_at(self._p, _name_arg(name), x.id, pos.id,
                                             _int(head_dim, "rope_at: head_dim"),
                                             float(theta), _ROPE_STYLES[style],
                                             ctypes.byref(err)), err, "rope_at")
        return self._scale(t, scaling, "rope_at")

    # -- shorthands for unary and binary operators
    def relu(self, x, name=None):
        """max(x, 0): unary(x, "relu")."""
        return self.unary(x, "relu", 0.0, name)

    def silu(self, x, name=None):
        """x * sigmoid(x): unary(x, "silu")."""
        return self.unary(x, "silu", 0.0, name)

    def gelu(self, x, name=None):
        """GELU, tanh approximation: unary(x, "gelu")."""
        return self.unary(x, "gelu", 0.0, name)

    def add(self, a, b, name=None):
        """a + b with broadcasting: binary(a, b, "add")."""
        return self.binary(a, b, "add", name)

    def sub(self, a, b, name=None):
        """a - b with broadcasting: binary(a, b, "sub")."""
        return self.binary(a, b, "sub", name)

    def mul(self, a, b, name=None):
        """a * b (elementwise) with broadcasting: binary(a, b, "mul")."""
        return self.binary(a, b, "mul", name)

    def div(self, a, b, name=None):
        """a / b with broadcasting: binary(a, b, "div")."""
        return self.binary(a, b, "div", name)

    def maximum(self, a, b, name=None):
        """max(a, b) elementwise with broadcasting: binary(a, b, "maximum")."""
        return self.binary(a, b, "maximum", name)

    # -- planning only
    def plan(self, devices, selector="dp"):
        """The logical plan alone (no exchanges, nothing runs): a list of
        dicts {name, op, split, repartition, join, aggregation} per
        operator and the total cost, as (total, ops)."""
        devices = _int(devices, "plan: devices")
        if selector not in ("dp", "greedy", "random"):
            _fail(L.EIN_EINVAL, "plan: selector %r; expected dp, greedy or random" % (selector,))
        opts = L.ein_plan_options(selector=selector.encode(), seed=1, linear_paths=0)
        out, err = ctypes.c_void_p(), L.ein_error()
        _check(_lib.ein_graph_plan(self._p, devices, ctypes.byref(opts), ctypes.byref(out),
                                   ctypes.byref(err)), err, "plan")
        try:
            return _read_plan(out)
        finally:
            _lib.ein_plan_free(out)


def _read_plan(pp):
    total = _lib.ein_plan_total_cost(pp)
    ops = []
    for i in range(_lib.ein_plan_nops(pp)):
        name, op = ctypes.c_char_p(), ctypes.c_char_p()
        split = ctypes.create_string_buffer(256)
        r, j, a = ctypes.c_double(), ctypes.c_double(), ctypes.c_double()
        if _lib.ein_plan_op(pp, i, ctypes.byref(name), ctypes.byref(op), split, 256,
                            ctypes.byref(r), ctypes.byref(j), ctypes.byref(a)) < 0:
            break
        ops.append({"name": name.value.decode(), "op": op.value.decode(),
                    "split": split.value.decode(), "repartition": r.value,
                    "join": j.value, "aggregation": a.value})
    return total, ops


def createGraph():
    """The paper's es.createGraph(): an empty graph."""
    return Graph()


# ---- compiling and running ----------------------------------------------
def _backend_auto():
    """(1, why) when a session with no backend runs the CUDA backend (a
    CUDA build that sees GPUs), else (0, why): ein_backend_auto, so the
    same detection as einrun's ($EIN_GPU_VISIBLE, CUDA_VISIBLE_DEVICES,
    /dev/nvidia*)."""
    err = L.ein_error()
    why = ctypes.create_string_buffer(64)
    rc = _check(_lib.ein_backend_auto(why, 64, ctypes.byref(err)), err, "backend")
    return rc, why.value.decode()


def _gpu_visible():
    return _backend_auto()[1] != "no GPU visible"


_BACKENDS = None


def _backends():
    """{name: row} of the library's kernel backends (ein_backend_get), in
    their order; a row is a ctypes ein_backend_info."""
    global _BACKENDS
    if _BACKENDS is None:
        rows = [_lib.ein_backend_get(i).contents for i in range(_lib.ein_backend_count())]
        _BACKENDS = {r.name.decode(): r for r in rows}
    return _BACKENDS


def _backend_check(backend, what):
    """The row of a backend= argument (None: None); EinValueError for a
    name that is no row, EinRuntimeError EIN_EDEVICE for one that cannot
    run here (not built, or no device visible)."""
    if backend is None:
        return None
    rows = _backends()
    if not isinstance(backend, str) or backend not in rows:
        names = ["'%s'" % n for n in rows]
        _fail(L.EIN_EINVAL, "%s: backend %r; expected %s or %s"
              % (what, backend, ", ".join(names[:-1]), names[-1]))
    row = rows[backend]
    err, why = L.ein_error(), ctypes.create_string_buffer(64)
    if not _check(_lib.ein_backend_present(ctypes.byref(row), why, 64, ctypes.byref(err)),
                  err, what):
        _fail(L.EIN_EDEVICE, "%s: backend=%r: %s" % (what, backend, why.value.decode()))
    return row


def _gpu_count():
    """GPUs visible: CUDA_VISIBLE_DEVICES when set, else /dev/nvidiaN."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None and _gpu_visible():
        return len([d for d in env.split(",") if d.strip() and not d.strip().startswith("-")])
    n = 0
    while os.path.exists("/dev/nvidia%d" % n):
        n += 1
    return n


def _default_backend(devices):
    """backend=None: "cuda" where a CUDA build sees GPUs, else "cpu" (and
    says why once, as einrun does)."""
    i, why = _backend_auto()
    if i:
        return list(_backends())[i]
    n = len(devices)
    if n:
        _say_once("einsummable: %s; running %d CPU device%s for device=%s"
                  % (why, n, "" if n == 1 else "s", list(devices)))
    else:
        _say_once("einsummable: %s; running CPU devices" % why)
    return "cpu"


_said = set()
_said_lock = threading.Lock()


def _say_once(msg):
    """einrun's notice about CPU devices, once per process and message."""
    with _said_lock:
        if msg in _said:
            return
        _said.add(msg)
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


_open_programs = weakref.WeakSet()


def _keep_bytes(keep, s):
    b = os.fsencode(s)
    keep.append(b)
    return b


def _progress_flag(progress):
    """ein_compile_options.progress: 1 shows progress lines when stderr is a
    terminal; None (the default) is that too, False never."""
    if progress is None:
        return 1
    return 1 if progress else 0


@atexit.register
def _close_all():
    # A run of another (daemon) thread is cancelled first: close() waits
    # for the program's lock, which that run holds.
    progs = list(_open_programs)
    for p in progs:
        p.cancel()
    for p in progs:
        try:
            p.close()
        except Exception:
            pass


# Signals the helper thread of an interruptible execute() blocks, so that
# the kernel hands them to the main thread (which runs Python's handlers).
_ASYNC_SIGNALS = ({getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT",
                                                "SIGALRM", "SIGUSR1", "SIGUSR2", "SIGCHLD",
                                                "SIGWINCH") if hasattr(signal, n)}
                  if hasattr(signal, "pthread_sigmask") else set())


def _find_worker(name):
    env = os.environ.get("EINWORKER")
    if env:
        return None  # the library reads $EINWORKER itself
    for d in L.bin_dirs():
        p = os.path.join(d, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


class Program:
    """A compiled graph (es.compileGraph). Its workers start at the first
    load() or execute() and stay alive, with every loaded input resident,
    until close(); use it as a context manager to close it for sure.

      load(tensor, array)   set an input (tensor: a Tensor or its name;
                            array: a NumPy array of exactly its shape and
                            dtype, or the path of a .npy file)
      execute()             run the program once
      offload(tensor)       a saved tensor's value after the last run, as a
                            new NumPy array
      explain()             the compiled program as text
      save(path)            write it to a file that es.load_program(path)
                            runs in another process, not compiled again
      close()               stop the workers (again: harmless)

    After execute(), last_run_seconds is the run's wall time and last_pids
    the worker processes' ids (one per device).

    bf16 tensors: load() takes float32 arrays (rounded to nearest, ties to
    even) or uint16 arrays of bfloat16 bit patterns; offload() returns
    float32 (exact), or with raw=True the uint16 bit patterns.

    A worker failure during execute() raises EinError (code EIN_EWORKER or
    EIN_ETIMEOUT) with the one-line report; the program's workers are then
    gone and every later load/execute/offload raises; close() stays
    harmless.

    Threads: a Program may be used from several threads; its calls run
    one at a time (a second thread's call waits for the first; the GIL is
    released while a run goes on, so other Python threads keep running).
    cancel() stops the execute() of another thread (which then raises
    EinError with code EIN_ECANCELED). The thread that compiled or first
    ran a program may end: the program lives on.

    Ctrl-C: the workers do not see a Ctrl-C at the prompt (they run in
    their own session), so open programs survive it. A Ctrl-C during
    execute() in the main thread cancels the run within about a second
    (between two instructions of each device), keeps the program usable
    (inputs stay loaded; outputs of the cancelled run are unset) and raises
    KeyboardInterrupt. Programs still open at exit are closed, whatever
    their number; their workers end with the process in any case."""

    def __init__(self, graph, devices, schedule_mode, backend, selector, seed, search_work,
                 topology, rewrite, worker_timeout, run_timeout, verbose,
                 generate_missing=False, trace=None, progress=None, _load=None,
                 partials="f32", memory_limit=None, no_reuse=False, connect_timeout=None,
                 strategy=None, named_backend=True):
        self._c = None
        self._s = None
        # One call at a time (Threads, above); re-entrant so that a close()
        # from __del__ or atexit in the same thread cannot deadlock.
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._state = "compiled"  # -> "open" -> "failed" / "closed"
        self._failure = None
        self._ran = False
        self.devices = list(devices)
        self.schedule_mode = schedule_mode
        self.backend = backend
        self._gpu_ids = (ctypes.c_int * len(devices))(*devices)
        dflt = {"worker_timeout": "the default, 60", "run_timeout": "none",
                "connect_timeout": "the default, 10 s a host (+ 10 s started over ssh)"}
        for what, v in (("worker_timeout", worker_timeout), ("run_timeout", run_timeout),
                        ("connect_timeout", connect_timeout)):
            if v is not None and not (isinstance(v, (int, float, numpy.integer, numpy.floating))
                                      and not isinstance(v, bool) and float(v) >= 0
                                      and float(v) != float("inf")):
                _fail(L.EIN_EINVAL, "compileGraph: %s=%r; expected seconds >= 0 (0: %s)"
                      % (what, v, dflt[what]))
        self._session_args = (worker_timeout, run_timeout, verbose, connect_timeout)
        self._generate_missing = bool(generate_missing)
        self._seed = 1 if seed is None else seed
        self.trace = trace
        self.last_stats = None
        self._progress = progress
        if _load is not None:
            self._load_saved(_load, topology, named_backend)
            return

        o = L.ein_compile_options()
        _lib.ein_compile_options_init(ctypes.byref(o))
        keep = []

        def cstr(s):
            b = s.encode("utf-8")
            keep.append(b)
            return b

        if selector is not None:
            o.selector = cstr(selector)
        o.naive_exchanges = 1 if schedule_mode == "naive" else 0
        if seed is not None:
            o.seed = _int(seed, "compileGraph: seed")
        if search_work is not None:
            o.search_work = _int(search_work, "compileGraph: search_work")
        if memory_limit is not None:
            if (isinstance(memory_limit, bool)
                    or not isinstance(memory_limit, (int, float, numpy.integer, numpy.floating))
                    or not float(memory_limit) > 0 or float(memory_limit) == float("inf")):
                _fail(L.EIN_EINVAL, "compileGraph: memory_limit=%r; expected bytes per device, "
                      "a number > 0" % (memory_limit,))
            o.memory_limit = float(memory_limit)
        if topology is not None:
            o.topology = cstr(topology)
        o.backend = cstr(backend)
        if _backends()[backend].probed:
            o.gpu_ids = self._gpu_ids
        o.rewrite = 1 if rewrite else 0
        if partials not in ("f32", "native"):
            _fail(L.EIN_EINVAL, "compileGraph: partials=%r; expected 'f32' or 'native'"
                  % (partials,))
        o.partials = cstr(partials)
        if strategy is not None:
            if not isinstance(strategy, str):
                _fail(L.EIN_EINVAL, "compileGraph: strategy=%r; expected megatron, ulysses, "
                      "sequence or data" % (strategy,))
            o.strategy = cstr(strategy)
        o.no_reuse = 1 if no_reuse else 0
        o.progress = _progress_flag(progress)
        chunks = os.environ.get("EIN_EXCHANGE_CHUNKS", "")
        if chunks:
            o.exchange_chunks = _exchange_chunks(chunks)
        self._compile_keep = keep
        out, err = ctypes.c_void_p(), L.ein_error()
        _check(_lib.ein_compile(graph._p, len(devices), ctypes.byref(o), ctypes.byref(out),
                                ctypes.byref(err)), err, "compileGraph")
        self._c = out
        self._read_tensors()

    def _load_saved(self, path, topology, named_backend):
        """ein_compiled_load_ex: the saved program at `path` for
        len(self.devices) devices (0: as saved), checked against this
        machine's topology as `topology` / a probed backend (backend="cuda")
        the caller named say, else as the program's compile found it."""
        o, keep = None, []
        row = _backends()[self.backend]
        if topology is not None or (row.probed and named_backend):
            o = L.ein_compile_options()
            _lib.ein_compile_options_init(ctypes.byref(o))
            if topology is not None:
                o.topology = _keep_bytes(keep, topology)
            if row.probed:
                o.backend = _keep_bytes(keep, self.backend)
                if self.devices:  # else the GPUs 0..n-1 of the saved count
                    o.gpu_ids = self._gpu_ids
        out, err = ctypes.c_void_p(), L.ein_error()
        _check(_lib.ein_compiled_load_ex(_keep_bytes(keep, path), len(self.devices),
                                         None if o is None else ctypes.byref(o),
                                         ctypes.byref(out), ctypes.byref(err)),
               err, "load_program")
        self._c = out
        if not self.devices:
            n = _lib.ein_compiled_ndevices(self._c)
            self.devices = list(range(n))
            self._gpu_ids = (ctypes.c_int * n)(*self.devices)
        self._read_tensors()

    def _read_tensors(self):
        # The compiled program's own graph (after a rewrite): names, types,
        # which are inputs and which are saved.
        gp = _lib.ein_compiled_graph(self._c)
        self._tensors = {}
        for tid in range(_lib.ein_graph_ntensors(gp)):
            name, shape, dtype, is_in, is_saved = _read_tensor(gp, tid)
            self._tensors[name] = (shape, dtype, is_in, is_saved)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "<einsummable.Program on %d %s device%s, %s>" % (
            len(self.devices), self.backend, "" if len(self.devices) == 1 else "s", self._state)

    # -- inspection
    @property
    def ndevices(self):
        """The number of devices the program was compiled for."""
        with self._lock:
            self._need_compiled("ndevices")
            return _lib.ein_compiled_ndevices(self._c)

    def inputs(self):
        """{name: (shape, dtype)} of the graph inputs."""
        return {n: (s, d) for n, (s, d, i, _) in self._tensors.items() if i}

    def outputs(self):
        """{name: (shape, dtype)} of the saved tensors."""
        return {n: (s, d) for n, (s, d, _, o) in self._tensors.items() if o}

    def explain(self, exchanges=True):
        """The compiled program as text: one line per operator, every
        device's program and (with exchanges) every exchange body."""
        with self._lock:
            self._need_compiled("explain")
            p = _lib.ein_compiled_explain(self._c, 1 if exchanges else 0)
        if not p:
            _fail(L.EIN_ENOMEM, "explain: out of memory")
        try:
            return ctypes.string_at(p).decode("utf-8", "replace")
        finally:
            _lib.free(p)

    def topology(self):
        """(name, description) of the topology the exchanges were made for."""
        d = ctypes.c_char_p()
        with self._lock:
            self._need_compiled("topology")
            n = _lib.ein_compiled_topology(self._c, ctypes.byref(d))
            return ((n or b"").decode(), (d.value or b"").decode())

    def exchanges(self):
        """Every exchange as (tensor, consumer, ExProg body text)."""
        with self._lock:
            return self._exchanges()

    def _exchanges(self):
        self._need_compiled("exchanges")
        out = []
        for i in range(_lib.ein_compiled_nexchanges(self._c)):
            t, c, b = ctypes.c_char_p(), ctypes.c_char_p(), ctypes.c_char_p()
            if _lib.ein_compiled_exchange(self._c, i, ctypes.byref(t), ctypes.byref(c),
                                          ctypes.byref(b)) < 0:
                break
            out.append(((t.value or b"").decode(), (c.value or b"").decode(),
                        (b.value or b"").decode()))
        return out

    def plan(self):
        """The logical plan: (total cost, [per-operator dicts])."""
        with self._lock:
            self._need_compiled("plan")
            return _read_plan(_lib.ein_compiled_plan(self._c))

    def predict(self, calibration=None):
        """Predict one iteration without running it: the simulator of
        einplan --simulate replays every device's compiled program on the
        topology with a calibrated roofline (calibration: a built-in name
        such as "host" or a file from einrun --calibrate; default: the
        topology's own). Returns a Prediction: .time (s), per-device
        .devices[d].compute / .comm / .idle and .peak_bytes, the critical
        path's split; str() of it is a short report."""
        self._need_compiled("predict")
        out, err = L.ein_prediction(), L.ein_error()
        cal = None if calibration is None else os.fsencode(calibration)
        _check(_lib.ein_compiled_predict(self._c, cal, ctypes.byref(out), ctypes.byref(err)),
               err, "predict")
        devs = [_stats.DevicePrediction(device=d, compute=out.dev[d].compute,
                                        comm=out.dev[d].comm, idle=out.dev[d].idle,
                                        end=out.dev[d].end, peak_bytes=int(out.dev[d].peak_bytes))
                for d in range(out.ndev)]
        return _stats.Prediction(time=out.time, makespan=out.makespan,
                                 path_compute=out.path_compute, path_comm=out.path_comm,
                                 path_wait=out.path_wait,
                                 calibration=out.calibration.decode("utf-8", "replace"),
                                 devices=devs)

    def __reduce__(self):
        _fail_type("a Program cannot be pickled (it owns worker processes); write it with "
                   "program.save(path) and read it with es.load_program(path)")

    def save(self, path):
        """Write the compiled program to `path` (conventionally *.einprog)
        so that es.load_program(path) runs it in another process without
        compiling again. The file holds the graph, plan, exchanges and every
        device's program, the library version and the topology it was
        compiled for (loading checks both). The same program always gives
        the same bytes. Raises EinError (EinIOError for a path that cannot
        be written)."""
        if not isinstance(path, (str, os.PathLike)):
            _fail_type("save: path=%r; expected a file path" % (path,))
        err = L.ein_error()
        with self._lock:
            self._need_compiled("save")
            _check(_lib.ein_compiled_save(self._c, os.fsencode(path), ctypes.byref(err)),
                   err, "save")

    # -- running
    def add_entry(self, name, outputs):
        """Entry point `name`: the saved `outputs` (a list of names) and
        only what they need (ein_compiled_add_entry). Call it before the
        first load or run; the program must be compiled with no_reuse."""
        with self._lock:
            self._need_compiled("add_entry")
            if self._s is not None:
                _fail(L.EIN_EINVAL, "add_entry: the program's session is open already; add "
                      "entry points before the first load or run")
            names = [o.encode("utf-8") for o in outputs]
            arr = (ctypes.c_char_p * max(1, len(names)))(*names)
            err = L.ein_error()
            _check(_lib.ein_compiled_add_entry(self._c, name.encode("utf-8"), arr, len(names),
                                               ctypes.byref(err)), err, "add_entry")

    def _need_compiled(self, what):
        if self._c is None:
            _fail(L.EIN_EINVAL, "%s: the program is closed" % what)

    def _need_session(self, what):
        if self._state == "failed":
            _fail(L.EIN_EINVAL, "%s: the program's workers stopped after a failure (%s); "
                  "compile it again" % (what, self._failure))
        if self._state == "closed":
            _fail(L.EIN_EINVAL, "%s: the program is closed" % what)
        if self._s is None:
            self._open()

    def _open(self):
        o = L.ein_session_options()
        _lib.ein_session_options_init(ctypes.byref(o))
        keep = []
        worker_timeout, run_timeout, verbose, connect_timeout = self._session_args
        row = _backends()[self.backend]
        o.backend = row.name
        if row.probed:
            o.gpu_ids = self._gpu_ids
        w = _find_worker(row.worker.decode())
        if w:
            b = w.encode()
            keep.append(b)
            o.worker = b
        if worker_timeout is not None:
            o.worker_timeout = float(worker_timeout)
        if run_timeout is not None:
            o.run_timeout = float(run_timeout)
        if connect_timeout is not None:
            o.connect_timeout = float(connect_timeout)
        o.verbose = 1 if verbose else 0
        o.generate_missing = 1 if self._generate_missing else 0
        o.progress = _progress_flag(self._progress)
        if self.trace is not None:
            o.trace_path = _keep_bytes(keep, self.trace)
        out, err = ctypes.c_void_p(), L.ein_error()
        _check(_lib.ein_session_open(self._c, ctypes.byref(o), ctypes.byref(out),
                                     ctypes.byref(err)), err, "session")
        self._s = out
        self._session_keep = keep
        self._state = "open"
        _open_programs.add(self)

    def _entry(self, tensor, what):
        if isinstance(tensor, Tensor):
            name = tensor.name
        elif isinstance(tensor, str):
            name = tensor
        else:
            _fail_type("%s: expected a Tensor or a tensor name, not %r"
                  % (what, tensor))
        e = self._tensors.get(name)
        if e is None:
            _fail(L.EIN_EINVAL, "%s: the program has no tensor '%s'" % (what, name))
        return name, e

    def _call(self, what, fn, *args):
        """Call a session function; a worker failure closes the program."""
        err = L.ein_error()
        rc = fn(self._s, *args, ctypes.byref(err))
        if rc < 0:
            self._failed_call(rc, err, what)
            _check(rc, err, what)
        return rc

    def _failed_call(self, rc, err, what):
        if rc in (L.EIN_EWORKER, L.EIN_ETIMEOUT, L.EIN_EPROTO, L.EIN_EDEVICE):
            self._failure = err.msg.decode("utf-8", "replace") or what
            self._state = "failed"
        elif rc == L.EIN_ECANCELED:
            self._ran = False

    def load(self, tensor, array):
        """Set input `tensor` for the next runs: a NumPy array of exactly
        its shape and dtype (bf16: float32 or uint16 bits), or the path of a
        .npy file. The value stays resident until loaded again."""
        name, (shape, dtype, is_in, _) = self._entry(tensor, "load")
        if not is_in:
            _fail(L.EIN_EINVAL, "load: '%s' is not an input of the program (it is computed)"
                  % name)
        if isinstance(array, (str, os.PathLike)):
            path = os.fspath(array)
            with self._lock:
                self._need_session("load")
                self._call("load", _lib.ein_session_set_input_npy, name.encode(),
                           path.encode())
            return
        data = self._to_bytes(name, shape, dtype, array)
        with self._lock:
            self._need_session("load")
            self._call("load", _lib.ein_session_set_input, name.encode(),
                       data.ctypes.data_as(ctypes.c_void_p), data.nbytes)

    def load_safetensors(self, path, mapping=None):
        """Bind the tensors of a .safetensors file to inputs for the next
        runs: every input named like a tensor of the file, plus `mapping`
        ({input: tensor name}). dtype and shape must match exactly; each
        device reads only its own blocks. Returns the number bound."""
        mapping = mapping or {}
        pairs = [("%s=%s" % (k, v)).encode() for k, v in mapping.items()]
        arr = (ctypes.c_char_p * (len(pairs) + 1))(*pairs) if pairs else None
        nb = ctypes.c_int(0)
        with self._lock:
            self._need_session("load_safetensors")
            self._call("load_safetensors", _lib.ein_session_load_safetensors,
                       os.fspath(path).encode(), arr, len(pairs), ctypes.byref(nb))
        return nb.value

    @staticmethod
    def _to_bytes(name, shape, dtype, array):
        if not isinstance(array, numpy.ndarray):
            _fail_type("load: %s needs a numpy.ndarray, not %s"
                  % (name, type(array).__name__))
        if (dtype in _BLOCK_BYTES and array.dtype == numpy.uint8 and
                tuple(array.shape) == shape[:-1] + (shape[-1] // 32 * _BLOCK_BYTES[dtype],)):
            return numpy.ascontiguousarray(array)   # quantize()'s blocks as they are
        if tuple(array.shape) != shape:
            _fail(L.EIN_ESHAPE, "load: %s is %s %s but the array's shape is %s"
                  % (name, dtype, list(shape), list(array.shape)))
        a = array
        if dtype in _BLOCK_BYTES:   # quantized at load, round to nearest (issue 36)
            if a.dtype.kind != "f":
                _fail(L.EIN_ESHAPE, "load: %s is %s; give float values (quantized here) or "
                      "uint8 blocks from quantize()" % (name, dtype))
            return quantize(a, dtype)
        if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and sys.byteorder == "big"):
            a = a.astype(a.dtype.newbyteorder("<"))
        if dtype == "bf16":
            if a.dtype == numpy.float32:
                return _bf16_from_f32(a)
            if a.dtype == numpy.uint16 or a.dtype.name == "bfloat16":
                return numpy.ascontiguousarray(a).view(numpy.uint16)
            _fail(L.EIN_ESHAPE, "load: %s is bf16 but the array is %s; give float32 values "
                  "(rounded to bf16) or uint16 bf16 bit patterns" % (name, a.dtype))
        want = _DTYPES[dtype][1]
        if a.dtype.newbyteorder("=") != want:
            _fail(L.EIN_ESHAPE, "load: %s is %s but the array is %s; convert it with "
                  ".astype(numpy.%s)" % (name, dtype, a.dtype, want.name))
        return numpy.ascontiguousarray(a, dtype=want)

    def execute(self):
        """Run the program once with the inputs loaded so far. Every input
        needs a value (load, load_safetensors) unless none was loaded at
        all: then every input is generated from the compile seed (a demo
        run) and a warning names them. compileGraph(..., generate_missing=
        True) generates the inputs never loaded instead of raising. In the
        main thread, a Ctrl-C (any exception a signal handler raises)
        cancels the run, keeps the program usable and is raised once the
        workers have stopped."""
        with self._lock:
            self._need_session("execute")
            self._warn_generated()
            stats = L.ein_run_stats()
            if threading.current_thread() is threading.main_thread():
                self._run_interruptible(stats)
            else:
                self._call("execute", _lib.ein_session_run, ctypes.byref(stats))
            self._ran = True
            self.last_run_seconds = stats.wall_s
            self.last_pids = [int(stats.dev[d].pid) for d in range(min(stats.ndev, 64))]
            self.last_stats = _stats.run_stats(stats)

    def _warn_generated(self):
        """Say which inputs a run generates (the library refuses a run with
        some inputs set and others not, unless generate_missing)."""
        names = [n for n in self.inputs()
                 if _lib.ein_session_input_is_set(self._s, n.encode()) == 0]
        if names and (self._generate_missing or len(names) == len(self.inputs())):
            if names != getattr(self, "_warned_generated", None):
                warnings.warn("einsummable: generating input%s %s from seed %d (%s)" % (
                    "" if len(names) == 1 else "s", ", ".join(names), self._seed,
                    "generate_missing=True" if len(names) < len(self.inputs())
                    else "no input was loaded"), stacklevel=3)
                self._warned_generated = names

    def _run_interruptible(self, stats):
        """ein_session_run in a helper thread while this (the main) thread
        waits in short, interruptible steps: Python runs signal handlers in
        the main thread only, between bytecodes, never inside a foreign
        call. An exception from a handler (KeyboardInterrupt) cancels the
        run (ein_session_cancel, again each step until the run returns: a
        cancel before the run began would not count), then is raised."""
        s, out, done = self._s, {}, threading.Event()

        def run():
            try:
                # Signals go to the main thread, which waits to act on them.
                if _ASYNC_SIGNALS:
                    signal.pthread_sigmask(signal.SIG_BLOCK, _ASYNC_SIGNALS)
                err = L.ein_error()
                out["rc"] = _lib.ein_session_run(s, ctypes.byref(stats), ctypes.byref(err))
                out["err"] = err
            finally:
                done.set()

        th = threading.Thread(target=run, name="einsummable-execute", daemon=True)
        th.start()
        raised = None
        while not done.is_set():
            try:
                done.wait(0.05)
                if raised is not None and not done.is_set():
                    _lib.ein_session_cancel(s)
            except BaseException as e:  # re-raised once the run has returned
                if raised is None:
                    raised = e
                _lib.ein_session_cancel(s)
        th.join()
        rc, err = out.get("rc", L.EIN_EIO), out.get("err", L.ein_error())
        if rc < 0:
            self._failed_call(rc, err, "execute")  # cancelled: outputs unset
        if raised is not None:
            raise raised
        if rc < 0:
            _check(rc, err, "execute")

    def cancel(self):
        """Cancel the execute() running in another thread, if any (it
        raises EinError with code EIN_ECANCELED; the program stays usable).
        Harmless when nothing runs. Takes no lock."""
        s = self._s
        if s is not None and self._pid == os.getpid():
            _lib.ein_session_cancel(s)

    def offload(self, tensor, raw=False):
        """A saved tensor's value as of the last execute(), as a new NumPy
        array (bf16: float32, or uint16 bits with raw=True)."""
        name, (shape, dtype, _, is_saved) = self._entry(tensor, "offload")
        if not is_saved:
            _fail(L.EIN_EINVAL, "offload: '%s' is not saved (graph.save it before compiling)"
                  % name)
        out = numpy.empty(shape, dtype=_DTYPES[dtype][1])
        got = ctypes.c_size_t()
        with self._lock:
            self._need_session("offload")
            if not self._ran:
                _fail(L.EIN_EINVAL, "offload: '%s' has no value yet; call execute() first"
                      % name)
            self._call("offload", _lib.ein_session_get_output, name.encode(),
                       out.ctypes.data_as(ctypes.c_void_p), out.nbytes, ctypes.byref(got))
        if dtype == "bf16" and not raw:
            return _f32_from_bf16(out)
        return out

    def close(self):
        """Stop the workers and free the compiled program; harmless when
        already closed. Raises EinError only if a worker failed while
        stopping (everything is freed anyway). Waits for a call of another
        thread to end; in a forked child it only forgets the parent's
        workers (they are the parent's)."""
        lock = getattr(self, "_lock", None)
        if lock is None:  # __init__ failed before the lock existed
            return
        with lock:
            s, c = self._s, self._c
            self._s, self._c = None, None
            if self._state != "failed":
                self._state = "closed"
            _open_programs.discard(self)
            rc, err = 0, L.ein_error()
            if s is not None:
                rc = _lib.ein_session_close(s, ctypes.byref(err))
            if c is not None:
                _lib.ein_compiled_free(c)
        if rc < 0 and self._failure is None:
            _check(rc, err, "close")


def _device_list(device, what):
    """device= as a list of ids (the paper's form), refusing one int."""
    if isinstance(device, (int, numpy.integer)) and not isinstance(device, bool):
        d = int(device)
        _fail_type("%s: device=%d is one number; give the list of devices, e.g. "
                   "device=%r for %d devices, or device=[%d] for device %d alone"
                   % (what, d, list(range(max(d, 1))), max(d, 1), d, d))
    elif isinstance(device, (str, bytes)) or not hasattr(device, "__iter__"):
        _fail_type("%s: device=%r; give the list of devices, e.g. device=[0, 1, 2, 3]"
                   % (what, device))
    device = [_int(d, "%s: device id" % what) for d in device]
    if not 1 <= len(device) <= 64:
        _fail(L.EIN_EINVAL, "%s: %d devices; expected 1..64" % (what, len(device)))
    if any(d < 0 for d in device):
        _fail(L.EIN_EINVAL, "%s: device ids must be >= 0, not %r" % (what, device))
    return device


# schedule_mode: einrun's --schedule vocabulary; "ai" (the paper's name) is
# an alias of "search".
_SCHEDULES = {"naive": "naive", "search": "search", "ai": "search"}


def compileGraph(graph, device=None, schedule_mode="naive", backend=None, selector="dp",
                 seed=None, search_work=None, topology=None, rewrite=False,
                 worker_timeout=None, run_timeout=None, verbose=False,
                 generate_missing=False, trace=None, progress=None, partials="f32",
                 memory_limit=None, no_reuse=False, connect_timeout=None, strategy=None):
    """The paper's es.compileGraph: plan `graph` over the devices listed in
    `device` (default: every visible GPU, or one device when none is
    visible), make every exchange program (schedule_mode "naive": the naive
    bodies; "search", or the paper's "ai": synthesised on the topology's
    simulator, einrun --schedule search) and lower each device's part.
    Returns a Program (load / execute / offload / explain / predict /
    close). backend=None (default) runs the CUDA backend where this library
    was built with CUDA and GPUs are visible (es.ein_backend_auto's rule,
    einrun's), else CPU devices (one worker process each), and then says
    why once on stderr, as einrun does. backend="cpu" forces CPU devices,
    backend="cuda" the GPUs (EinRuntimeError EIN_EDEVICE without one).

    trace: a path; the session writes a Chrome trace (Perfetto) of every
    device's runs there when the program is closed (einrun --trace).
    progress: show a progress line on stderr while compiling, and while a
    run of execute() takes longer than a second (True or None, the
    default: only when stderr is a terminal, as einrun does; the line is
    erased when the work ends; False: never).
    partials: "f32" (the default) moves and aggregates the partial sums of
    a split contraction in f32; "native" in the tensor's dtype (half the
    bytes for bf16/f16, rounded at each step), as einrun --partials.
    memory_limit: bytes per device the plan must fit in (einrun
    --memory-limit): the plan search keeps only plans whose predicted peak
    fits it (or the topology's memory, if smaller), checked on the whole
    graph; None (default): the topology's memory.

    no_reuse: every buffer in a place of its own (no memory reuse), which
    entry points (Program.add_entry) need.

    connect_timeout: seconds from starting a host's agent until it must
    reach the coordinator, on a session of several hosts (einrun
    --connect-timeout, ein_session_options.connect_timeout); None or 0:
    the default (10 s, + 10 s for an agent started over ssh). Negative,
    NaN or non-numeric: EinValueError naming it.

    strategy: None (the planner chooses), or a hand-written strategy the
    plan follows (einrun --strategy: "megatron", "ulysses", "sequence",
    "data"; planner/pl_strategy.h); the labels it ranks are the tensors'
    dim_names."""
    if not isinstance(graph, Graph):
        _fail_type("compileGraph: expected a graph from es.createGraph(), not %r"
              % (graph,))
    if schedule_mode not in _SCHEDULES:
        _fail(L.EIN_EINVAL, "compileGraph: schedule_mode %r; expected 'naive' or 'search' "
              "('ai' is another name of 'search')" % (schedule_mode,))
    if backend is not None and backend not in _backends():
        _backend_check(backend, "compileGraph")
    if device is None:
        device = list(range(max(1, _gpu_count())))
    device = _device_list(device, "compileGraph")
    if not graph._saved:
        _fail(L.EIN_EINVAL, "compileGraph: the graph saves no tensor; call graph.save(y)")
    _backend_check(backend, "compileGraph")
    if backend is None:
        backend = _default_backend(device)
    if trace is not None and not isinstance(trace, (str, os.PathLike)):
        _fail_type("compileGraph: trace=%r; expected the path of a .json file" % (trace,))
    return Program(graph, device, _SCHEDULES[schedule_mode], backend, selector, seed,
                   search_work, topology, rewrite, worker_timeout, run_timeout, verbose,
                   generate_missing, trace=None if trace is None else os.fspath(trace),
                   progress=progress, partials=partials, memory_limit=memory_limit,
                   no_reuse=no_reuse, connect_timeout=connect_timeout,
                   strategy=strategy)


def load_program(path, device=None, backend=None, topology=None, worker_timeout=None,
                 run_timeout=None, verbose=False, generate_missing=False, trace=None,
                 progress=None, connect_timeout=None):
    """A program saved with Program.save(path), ready to run without
    compiling again (in this or any other process). device: the list of
    devices, as for compileGraph; its length must be the saved program's
    device count (default: that many, 0..n-1). The file must come from
    this library version and have been compiled for this machine's
    topology: found as `topology` (a built-in name or .topo file) or
    backend="cuda" (probing the GPUs in device) say, else the way the
    original compile found it. A mismatch raises EinError naming what
    differs (EinValueError: the library version or the device count;
    EinRuntimeError, code EIN_EDEVICE: the topology); a file that is not a
    saved program raises EinParseError; a missing one, or a FIFO or
    directory in its place, EinIOError. The other arguments are
    compileGraph's."""
    if not isinstance(path, (str, os.PathLike)):
        _fail_type("load_program: path=%r; expected the path of a saved program" % (path,))
    if backend is not None and backend not in _backends():
        _backend_check(backend, "load_program")
    devices = [] if device is None else _device_list(device, "load_program")
    _backend_check(backend, "load_program")
    if trace is not None and not isinstance(trace, (str, os.PathLike)):
        _fail_type("load_program: trace=%r; expected the path of a .json file" % (trace,))
    named = backend is not None
    if backend is None:
        backend = _default_backend(devices)
    return Program(None, devices, None, backend, None, None, None, topology, False,
                   worker_timeout, run_timeout, verbose, generate_missing,
                   trace=None if trace is None else os.fspath(trace), progress=progress,
                   _load=os.fspath(path), connect_timeout=connect_timeout,
                   named_backend=named)
