"""einsummable._graph — graphs of abstract operators (es.createGraph,
Graph, Tensor, TensorDesc) over libeinsummable's graph API."""

import ctypes

import numpy

from . import _lib as L
from ._dtypes import _DTYPE_BY_CODE, _DTYPES, _dtype_name
from ._util import _check, _fail, _fail_type, _int, _name_arg, _window

_lib = L.lib


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


def _read_ops():
    """The library's operator table (ein_op_row): {class: names}, in its
    order (common/ir/ein_ops.def's)."""
    ops = {L.EIN_OP_UNARY: [], L.EIN_OP_BINARY: [], L.EIN_OP_REDUCE: []}
    for i in range(_lib.ein_op_count()):
        e = L.ein_op_entry()
        if _lib.ein_op_row(i, ctypes.byref(e)) < 0 or e.op_class not in ops:
            raise ImportError("einsummable: %s: ein_op_row(%d) failed" % (_lib.path, i))
        ops[e.op_class].append(e.name.decode())
    return {k: tuple(v) for k, v in ops.items()}


_OPS = _read_ops()
_UNARY, _BINARY, _REDUCE = _OPS[L.EIN_OP_UNARY], _OPS[L.EIN_OP_BINARY], _OPS[L.EIN_OP_REDUCE]
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
        if op not in _REDUCE:
            _fail(L.EIN_EINVAL, "reduce: unknown operator %r; expected %s"
                  % (op, " or ".join(_REDUCE)))
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
