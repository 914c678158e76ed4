"""einsummable._program — compiled programs and their sessions
(es.compileGraph, es.load_program, Program) over libeinsummable."""

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
from ._dtypes import _BLOCK, _BLOCK_BYTES, _DTYPES, _bf16_from_f32, _f32_from_bf16, quantize
from ._graph import Graph, Tensor, _read_plan, _read_tensor
from ._util import _check, _exchange_chunks, _fail, _fail_type, _int

_lib = L.lib


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
                tuple(array.shape) == shape[:-1] + (shape[-1] // _BLOCK[dtype] *
                                                    _BLOCK_BYTES[dtype],)):
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
