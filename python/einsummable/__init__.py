"""einsummable — the paper's Python interface to Einsummable-C.

    import numpy as np
    import einsummable as es

    graph = es.createGraph()
    x  = graph.insertTensor(es.tensorDesc([tokens, d_model], "f32"))
    w1 = graph.insertTensor(es.tensorDesc([d_model, d_ff], "f32"))
    w2 = graph.insertTensor(es.tensorDesc([d_ff, d_model], "f32"))
    act = graph.matmul(x, w1)
    hidden = graph.unary(act, "relu", 0.0)
    y = graph.matmul(hidden, w2)
    graph.save(y)
    with es.compileGraph(graph, device=[0, 1, 2, 3], schedule_mode="search") as prog:
        prog.load(x, X); prog.load(w1, W1); prog.load(w2, W2)
        prog.execute()
        Y = prog.offload(y)          # a numpy.ndarray
        print(prog.last_stats)       # per-device times of the run
        print(prog.predict())        # the simulator's prediction
        prog.save("ffn.einprog")     # es.load_program("ffn.einprog") elsewhere

A thin ctypes layer over libeinsummable (include/einsummable/einsummable.h):
no compiled extension, NumPy arrays in and out. Every failure raises
EinError (.code: a negative EIN_E* code, .message: one line), through a
subclass that is also a ValueError (EinValueError, EinShapeError, ...),
TypeError (EinTypeError), OSError, MemoryError or RuntimeError
(EinRuntimeError, WorkerError, ...): see einsummable._errors.

Generation with a Hugging Face LLaMA checkpoint: es.llama.load(files,
"config.json", device=[0, 1]).generate(prompt_ids) (docs/generation.md).

Public names: createGraph, tensorDesc, compileGraph, load_program, Graph, Tensor,
TensorDesc, Program, RunStats, DeviceStats, Prediction, DevicePrediction,
the exceptions, the EIN_E* codes, library_path, __version__.
The operators (Graph methods): insertTensor, save, matmul, einsum, unary,
binary, softmax, rmsnorm, layernorm, rope, attention, reduce, concat, slice,
split_heads, merge_heads, embedding, state, cache_write, decode_attention,
rope_at (and the shorthands relu, silu, gelu, add, sub,
mul, div, maximum); tensor(name), tensors() and plan(devices) read a graph
back. dtypes: "f32", "f16", "bf16" or numpy.float32 / numpy.float16.
"""

from ._errors import (EIN_ECANCELED, EIN_EDEVICE, EIN_EINVAL, EIN_EIO, EIN_ELIMIT,
                      EIN_ENOMEM, EIN_ENOPLAN, EIN_EPARSE, EIN_EPROTO, EIN_ESHAPE,
                      EIN_ETIMEOUT, EIN_EUNSUPPORTED, EIN_EWORKER, EinCancelledError, EinError,
                      EinIOError, EinLimitError, EinMemoryError, EinNoPlanError, EinParseError,
                      EinRuntimeError, EinShapeError, EinTimeoutError, EinTypeError,
                      EinUnsupportedError, EinValueError, WorkerError)
from ._lib import lib as _lib_handle
from ._core import (Graph, Program, Tensor, TensorDesc, compileGraph, createGraph,
                    load_program, tensorDesc)
from ._stats import DevicePrediction, DeviceStats, Prediction, RunStats
from ._version import __version__
from . import llama

library_path: str = _lib_handle.path
"""The path of the libeinsummable that was loaded."""

__all__ = [
    "createGraph", "tensorDesc", "compileGraph", "load_program", "Graph", "Tensor", "TensorDesc", "Program",
    "RunStats", "DeviceStats", "Prediction", "DevicePrediction",
    "EinError", "EinValueError", "EinShapeError", "EinParseError", "EinLimitError",
    "EinNoPlanError", "EinTypeError", "EinIOError", "EinMemoryError", "EinRuntimeError",
    "EinUnsupportedError", "WorkerError", "EinTimeoutError", "EinCancelledError",
    "library_path", "__version__", "llama", "EIN_EINVAL", "EIN_ENOMEM", "EIN_EIO", "EIN_EPARSE",
    "EIN_ESHAPE", "EIN_EPROTO", "EIN_ENOPLAN", "EIN_ETIMEOUT", "EIN_EWORKER",
    "EIN_EUNSUPPORTED", "EIN_EDEVICE", "EIN_ELIMIT", "EIN_ECANCELED",
]
