"""einsummable._lib — ctypes declarations of libeinsummable's public C API
(include/einsummable/einsummable.h and ein_types.h) and how the shared
library is found.

The library is looked for, in order:
  1. $EIN_LIBRARY: the path of libeinsummable.so itself;
  2. $EIN_BUILDDIR/.libs/libeinsummable.so (a build tree; `make check` sets it);
  3. where `make install` put it: _paths.py, written at install time, holds
     the library and binary folders relative to this package, so a prefix
     that is moved as a whole still works;
  4. the build tree this package's source sits in (python/einsummable/ ->
     ../../.libs/), for an in-tree build used without installing;
  5. the system's loader (ldconfig, LD_LIBRARY_PATH).
The first candidate that exists is loaded; if none loads, importing the
package raises ImportError saying where it looked.

The structs below mirror the C layout field by field. Option structs are
always filled by the library's own *_init functions first and carry spare
room at the end, so a field appended to them in C does not overrun memory
here (a field inserted in the middle would need this file updated).
"""

import ctypes
import os

# Error codes and exceptions: _errors.py.
from ._errors import (EIN_EDEVICE, EIN_EINVAL, EIN_EIO, EIN_ELIMIT,  # noqa: F401
                      EIN_ENOMEM, EIN_ENOPLAN, EIN_EPARSE, EIN_EPROTO, EIN_ESHAPE,
                      EIN_ETIMEOUT, EIN_EUNSUPPORTED, EIN_EWORKER, EIN_ECANCELED, EIN_OK, EinError)

EIN_DESC_MAX_RANK = 8
EIN_ERROR_MSG_MAX = 1024

_c_char_pp = ctypes.POINTER(ctypes.c_char_p)


class ein_error(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * EIN_ERROR_MSG_MAX)]


class ein_tensor_desc(ctypes.Structure):
    _fields_ = [
        ("rank", ctypes.c_int),
        ("shape", ctypes.c_int64 * EIN_DESC_MAX_RANK),
        ("dtype", ctypes.c_int),
        ("dim_names", ctypes.c_char_p * EIN_DESC_MAX_RANK),
    ]


class ein_rope_scaling(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("factor", ctypes.c_double),
                ("low_freq_factor", ctypes.c_double), ("high_freq_factor", ctypes.c_double),
                ("original_max_position", ctypes.c_double)]


class ein_plan_options(ctypes.Structure):
    _fields_ = [("selector", ctypes.c_char_p), ("seed", ctypes.c_uint64),
                ("linear_paths", ctypes.c_int)]


class ein_backend_info(ctypes.Structure):
    """A kernel backend's row (einsummable.h, "Kernel backends")."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("label", ctypes.c_char_p),
        ("device", ctypes.c_char_p),
        ("worker", ctypes.c_char_p),
        ("built", ctypes.c_int),
        ("probed", ctypes.c_int),
        ("host_visible", ctypes.c_int),
        ("graphs_default", ctypes.c_int),
        ("auto_pick", ctypes.c_int),
        ("host_times", ctypes.c_char_p),
    ]


class ein_dtype_entry(ctypes.Structure):
    """A row of the dtype table (ein_types.h, ein_dtype_row); _dtypes.py
    builds its lists from these."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("npy", ctypes.c_char_p),
        ("st", ctypes.c_char_p),
        ("size", ctypes.c_uint64),
        ("block_bytes", ctypes.c_uint64),
        ("block", ctypes.c_int32),
        ("is_float", ctypes.c_int32),
    ]


# ein_op_class (einsummable.h)
EIN_OP_UNARY, EIN_OP_BINARY, EIN_OP_REDUCE = 0, 1, 2


class ein_op_entry(ctypes.Structure):
    """A row of the operator table (einsummable.h, ein_op_row)."""
    _fields_ = [("name", ctypes.c_char_p), ("op_class", ctypes.c_int32),
                ("takes_c", ctypes.c_int32)]


class ein_compile_options(ctypes.Structure):
    _fields_ = [
        ("selector", ctypes.c_char_p),
        ("plan_seed", ctypes.c_uint64),
        ("linear_paths", ctypes.c_int),
        ("objective", ctypes.c_char_p),
        ("plan_only", ctypes.c_int),
        ("naive_exchanges", ctypes.c_int),
        ("search_work", ctypes.c_long),
        ("search_cap_ms", ctypes.c_double),
        ("topology", ctypes.c_char_p),
        ("backend", ctypes.c_char_p),
        ("gpu_ids", ctypes.POINTER(ctypes.c_int)),
        ("worker", ctypes.c_char_p),
        ("gpu_probe", ctypes.c_char_p),
        ("rewrite", ctypes.c_int),
        ("rewrite_weights", ctypes.c_char_p),
        ("ilp", ctypes.c_int),
        ("seed", ctypes.c_uint64),
        ("progress", ctypes.c_int),
        ("exchange_chunks", ctypes.c_int),
        ("no_reuse", ctypes.c_int),
        ("partials", ctypes.c_char_p),
        ("memory_limit", ctypes.c_double),
        ("strategy", ctypes.c_char_p),
        ("calibration", ctypes.c_char_p),
        ("_spare", ctypes.c_char * 256),
    ]


class ein_session_options(ctypes.Structure):
    _fields_ = [
        ("backend", ctypes.c_char_p),
        ("gpu_ids", ctypes.POINTER(ctypes.c_int)),
        ("worker", ctypes.c_char_p),
        ("worker_timeout", ctypes.c_double),
        ("run_timeout", ctypes.c_double),
        ("instr_timeout", ctypes.c_double),
        ("graphs", ctypes.c_int),
        ("verbose", ctypes.c_int),
        ("log_dir", ctypes.c_char_p),
        ("log_level", ctypes.c_int),
        ("trace_path", ctypes.c_char_p),
        ("wrapper", ctypes.c_char_p),
        ("wrapper_device", ctypes.c_int),
        ("debug_device", ctypes.c_int),
        ("manual", ctypes.c_int),
        ("handle_signals", ctypes.c_int),
        ("store_paths", _c_char_pp),
        ("generate_missing", ctypes.c_int),
        ("progress", ctypes.c_int),
        ("fake_hosts", ctypes.c_int),
        ("hosts_file", ctypes.c_char_p),
        ("connect_timeout", ctypes.c_double),
        ("launcher", ctypes.c_char_p),
        ("devices_per_host", ctypes.c_int),
        ("listen", ctypes.c_char_p),
        ("transport", ctypes.c_char_p),
        ("_spare", ctypes.c_char * 256),
    ]


class _dev_stats(ctypes.Structure):
    _fields_ = [
        ("pid", ctypes.c_long),
        ("total", ctypes.c_double),
        ("kernel", ctypes.c_double),
        ("copy", ctypes.c_double),
        ("wait", ctypes.c_double),
    ]


class _graph_stats(ctypes.Structure):
    _fields_ = [
        ("captured", ctypes.c_int),
        ("launched", ctypes.c_int),
        ("failed", ctypes.c_int),
        ("error", ctypes.c_char * 512),
        ("too_short", ctypes.c_int),
    ]


class ein_run_stats(ctypes.Structure):
    _fields_ = [("wall_s", ctypes.c_double), ("ndev", ctypes.c_int), ("dev", _dev_stats * 64),
                ("graphs", _graph_stats * 64), ("device_timed", ctypes.c_int * 64)]


class _dev_prediction(ctypes.Structure):
    _fields_ = [("compute", ctypes.c_double), ("comm", ctypes.c_double),
                ("idle", ctypes.c_double), ("end", ctypes.c_double),
                ("peak_bytes", ctypes.c_uint64)]


class ein_prediction(ctypes.Structure):
    _fields_ = [("time", ctypes.c_double), ("makespan", ctypes.c_double),
                ("path_compute", ctypes.c_double), ("path_comm", ctypes.c_double),
                ("path_wait", ctypes.c_double), ("ndev", ctypes.c_int),
                ("dev", _dev_prediction * 64), ("calibration", ctypes.c_char * 64)]


_P = ctypes.c_void_p
_I = ctypes.c_int
_E = ctypes.POINTER(ein_error)
_S = ctypes.c_char_p
_T = ctypes.c_int  # ein_tensor

# name: (restype, argtypes)
_PROTOS = {
    "ein_dtype_count": (_I, []),
    "ein_dtype_row": (_I, [_I, ctypes.POINTER(ein_dtype_entry)]),
    "ein_op_count": (_I, []),
    "ein_op_row": (_I, [_I, ctypes.POINTER(ein_op_entry)]),
    "ein_dtype_from_f32": (None, [_I, _P, _P, ctypes.c_size_t]),
    "ein_dtype_to_f32": (None, [_I, _P, _P, ctypes.c_size_t]),
    "ein_strerror": (_S, [_I]),
    "ein_graph_create": (_P, []),
    "ein_graph_destroy": (None, [_P]),
    "ein_graph_insert_tensor": (_T, [_P, _S, ein_tensor_desc, _E]),
    "ein_graph_save": (_I, [_P, _T, _E]),
    "ein_graph_matmul": (_T, [_P, _S, _T, _T, _E]),
    "ein_graph_einsum": (_T, [_P, _S, _S, _T, _T, _E]),
    "ein_graph_unary": (_T, [_P, _S, _S, ctypes.c_double, _T, _E]),
    "ein_graph_binary": (_T, [_P, _S, _S, _T, _T, _E]),
    "ein_graph_softmax": (_T, [_P, _S, _T, _I, _E]),
    "ein_graph_rmsnorm": (_T, [_P, _S, _T, _T, ctypes.c_double, _E]),
    "ein_graph_layernorm": (_T, [_P, _S, _T, _T, _T, ctypes.c_double, _E]),
    "ein_graph_rope": (_T, [_P, _S, _T, ctypes.c_int64, ctypes.c_double,
                            ctypes.POINTER(ctypes.c_int64), _I, _E]),
    "ein_graph_rope_ex": (_T, [_P, _S, _T, ctypes.c_int64, ctypes.c_double,
                               ctypes.POINTER(ctypes.c_int64), _I, _I, _E]),
    "ein_graph_attention": (_T, [_P, _S, _T, _T, _T, ctypes.POINTER(ctypes.c_int64), _I, _E]),
    "ein_graph_attention_window": (_T, [_P, _S, _T, _T, _T, ctypes.POINTER(ctypes.c_int64), _I,
                                        ctypes.c_int64, _E]),
    "ein_graph_reduce": (_T, [_P, _S, _S, ctypes.c_uint32, _T, _E]),
    "ein_graph_concat": (_T, [_P, _S, _I, ctypes.POINTER(_T), _I, _E]),
    "ein_graph_slice": (_T, [_P, _S, _T, _I, ctypes.c_int64, ctypes.c_int64, _E]),
    "ein_graph_split_heads": (_T, [_P, _S, _T, ctypes.c_int64, _E]),
    "ein_graph_merge_heads": (_T, [_P, _S, _T, _E]),
    "ein_graph_embedding": (_T, [_P, _S, _T, _T, _E]),
    "ein_graph_state": (_T, [_P, _S, ein_tensor_desc, _E]),
    "ein_graph_cache_write": (_T, [_P, _S, _T, _T, _T, _E]),
    "ein_graph_decode_attention": (_T, [_P, _S, _T, _T, _T, _T, _E]),
    "ein_graph_decode_attention_window": (_T, [_P, _S, _T, _T, _T, _T, ctypes.c_int64, _E]),
    "ein_graph_rope_at": (_T, [_P, _S, _T, _T, ctypes.c_int64, ctypes.c_double, _I, _E]),
    "ein_graph_rope_scaling": (_I, [_P, _T, ctypes.POINTER(ein_rope_scaling), _E]),
    "ein_graph_ntensors": (_I, [_P]),
    "ein_graph_find": (_T, [_P, _S, _E]),
    "ein_graph_tensor": (_I, [_P, _T, ctypes.POINTER(_S), ctypes.POINTER(ein_tensor_desc),
                              ctypes.POINTER(_I), ctypes.POINTER(_I)]),
    "ein_graph_plan": (_I, [_P, _I, ctypes.POINTER(ein_plan_options), ctypes.POINTER(_P), _E]),
    "ein_plan_total_cost": (ctypes.c_double, [_P]),
    "ein_plan_nops": (_I, [_P]),
    "ein_plan_op": (_I, [_P, _I, ctypes.POINTER(_S), ctypes.POINTER(_S), ctypes.c_char_p,
                         ctypes.c_size_t, ctypes.POINTER(ctypes.c_double),
                         ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double)]),
    "ein_plan_free": (None, [_P]),
    "ein_compile_options_init": (None, [ctypes.POINTER(ein_compile_options)]),
    "ein_compile": (_I, [_P, _I, ctypes.POINTER(ein_compile_options), ctypes.POINTER(_P), _E]),
    "ein_compiled_free": (None, [_P]),
    "ein_compiled_ndevices": (_I, [_P]),
    "ein_compiled_graph": (_P, [_P]),
    "ein_compiled_plan": (_P, [_P]),
    "ein_compiled_topology": (_S, [_P, ctypes.POINTER(_S)]),
    "ein_compiled_nexchanges": (_I, [_P]),
    "ein_compiled_exchange": (_I, [_P, _I, ctypes.POINTER(_S), ctypes.POINTER(_S),
                                   ctypes.POINTER(_S)]),
    "ein_compiled_program": (_I, [_P, _I, ctypes.POINTER(_I), ctypes.POINTER(_I),
                                  ctypes.POINTER(ctypes.c_uint64)]),
    "ein_compiled_exchange_time": (None, [_P, ctypes.POINTER(ctypes.c_double),
                                          ctypes.POINTER(ctypes.c_double)]),
    # Returns malloc'd text: kept as a raw pointer so that it can be freed.
    "ein_compiled_explain": (_P, [_P, _I]),
    "ein_compiled_predict": (_I, [_P, _S, ctypes.POINTER(ein_prediction), _E]),
    "ein_compiled_save": (_I, [_P, _S, _E]),
    "ein_compiled_load_ex": (_I, [_S, _I, ctypes.POINTER(ein_compile_options),
                                  ctypes.POINTER(_P), _E]),
    "ein_version": (_S, []),
    "ein_session_options_init": (None, [ctypes.POINTER(ein_session_options)]),
    "ein_backend_auto": (_I, [ctypes.c_char_p, ctypes.c_size_t, _E]),
    "ein_backend_count": (_I, []),
    "ein_backend_get": (ctypes.POINTER(ein_backend_info), [_I]),
    "ein_backend_present": (_I, [ctypes.POINTER(ein_backend_info), ctypes.c_char_p,
                                 ctypes.c_size_t, _E]),
    "ein_session_open": (_I, [_P, ctypes.POINTER(ein_session_options), ctypes.POINTER(_P), _E]),
    "ein_session_set_input": (_I, [_P, _S, _P, ctypes.c_size_t, _E]),
    "ein_session_set_input_npy": (_I, [_P, _S, _S, _E]),
    "ein_session_load_safetensors": (_I, [_P, _S, ctypes.POINTER(_S), _I,
                                          ctypes.POINTER(_I), _E]),
    "ein_session_input_is_set": (_I, [_P, _S]),
    "ein_session_run": (_I, [_P, ctypes.POINTER(ein_run_stats), _E]),
    "ein_session_run_ex": (_I, [_P, _I, ctypes.POINTER(ein_run_stats), _E]),
    "ein_session_run_entry": (_I, [_P, _S, _I, ctypes.POINTER(ein_run_stats), _E]),
    "ein_compiled_add_entry": (_I, [_P, _S, _c_char_pp, _I, _E]),
    "ein_session_get_output": (_I, [_P, _S, _P, ctypes.c_size_t,
                                    ctypes.POINTER(ctypes.c_size_t), _E]),
    "ein_session_output_path": (_S, [_P, _S]),
    "ein_session_close": (_I, [_P, _E]),
    "ein_session_cancel": (None, [_P]),
    # Returns malloc'd JSON text: kept as a raw pointer so that it can be freed.
    "ein_model_config_json": (_P, [_S, _S, _E]),
}

_SONAME = "libeinsummable.so"


def _paths_module():
    try:
        from . import _paths  # written by `make install` only
    except ImportError:
        return None
    return _paths


def _candidates():
    """(path, why) pairs in the order they are tried."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    lib = os.environ.get("EIN_LIBRARY")
    if lib:
        out.append((lib, "$EIN_LIBRARY"))
    bld = os.environ.get("EIN_BUILDDIR")
    if bld:
        out.append((os.path.join(bld, ".libs", _SONAME), "$EIN_BUILDDIR"))
    paths = _paths_module()
    if paths is not None:
        out.append((os.path.normpath(os.path.join(here, paths.LIBDIR, _SONAME)),
                    "the installed prefix"))
    out.append((os.path.normpath(os.path.join(here, "..", "..", ".libs", _SONAME)),
                "the build tree around the package"))
    return out


def bin_dirs():
    """Folders that may hold einworker, best first: the build tree, then
    the installed prefix's bindir."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    bld = os.environ.get("EIN_BUILDDIR")
    if bld:
        out.append(bld)
    paths = _paths_module()
    if paths is not None:
        out.append(os.path.normpath(os.path.join(here, paths.BINDIR)))
    out.append(os.path.normpath(os.path.join(here, "..", "..")))
    return out


def _load():
    tried = []
    for path, why in _candidates():
        if not os.path.isfile(path):
            tried.append("%s (%s: no such file)" % (path, why))
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s: %s)" % (path, why, e))
    try:
        return ctypes.CDLL(_SONAME), _SONAME
    except OSError as e:
        tried.append("%s (the system loader: %s)" % (_SONAME, e))
    raise ImportError("einsummable: cannot load libeinsummable; tried " + "; ".join(tried) +
                      ". Build it (make), install it (make install), or set EIN_LIBRARY "
                      "to the path of libeinsummable.so")


class _Lib:
    """The loaded library with prototypes set; a missing symbol becomes a
    function that raises, so a partial library still imports."""

    def __init__(self):
        self.cdll, self.path = _load()
        self.missing = []
        for name, (res, args) in _PROTOS.items():
            try:
                f = getattr(self.cdll, name)
            except AttributeError:
                self.missing.append(name)
                setattr(self, name, _missing(name, self.path))
                continue
            f.restype = res
            f.argtypes = args
            setattr(self, name, f)
        libc = ctypes.CDLL(None)
        self.free = libc.free
        self.free.restype = None
        self.free.argtypes = [_P]


def _missing(name, path):
    def f(*args):
        raise EinError(EIN_EUNSUPPORTED, "einsummable: %s has no %s (a library older than "
                       "this package?)" % (path, name))
    return f


lib = _Lib()
