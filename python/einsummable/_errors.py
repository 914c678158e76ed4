"""einsummable._errors — the exceptions of the package.

Every failure is an EinError (.code: the library's negative EIN_E* code,
.message: one line). Each kind of problem is also the Python exception a
NumPy or JAX user expects, so `except ValueError` works:

    EinError(Exception)
    ├── EinValueError(EinError, ValueError)      EIN_EINVAL: a bad argument
    │   ├── EinShapeError                        EIN_ESHAPE: shapes or dtypes that do not fit
    │   ├── EinParseError                        EIN_EPARSE: a malformed file (.ein, .npy, ...)
    │   ├── EinLimitError                        EIN_ELIMIT: over a limit (memory of a device, ...)
    │   └── EinNoPlanError                       EIN_ENOPLAN: no plan for this graph on P devices
    ├── EinTypeError(EinError, TypeError)        an argument of the wrong Python type (EIN_EINVAL)
    ├── EinIOError(EinError, OSError)            EIN_EIO: reading or writing a file
    ├── EinMemoryError(EinError, MemoryError)    EIN_ENOMEM
    └── EinRuntimeError(EinError, RuntimeError)  EIN_EPROTO, EIN_EDEVICE
        ├── EinUnsupportedError(.., NotImplementedError)  EIN_EUNSUPPORTED
        ├── EinCancelledError                    EIN_ECANCELED: a run cancelled (Program.cancel)
        └── WorkerError                          EIN_EWORKER: a worker failed during a run
            └── EinTimeoutError                      EIN_ETIMEOUT: a worker or run over its timeout

EinError(code, message) itself makes the subclass of its code, so code that
raises or catches EinError keeps working.
"""

from typing import Any, Dict, Tuple, Type

# Error codes (include/einsummable/ein_types.h).
EIN_OK = 0
EIN_EINVAL = -1
EIN_ENOMEM = -2
EIN_EIO = -3
EIN_EPARSE = -4
EIN_ESHAPE = -5
EIN_EPROTO = -6
EIN_ENOPLAN = -7
EIN_ETIMEOUT = -8
EIN_EWORKER = -9
EIN_EUNSUPPORTED = -10
EIN_EDEVICE = -11
EIN_ELIMIT = -12
EIN_ECANCELED = -13


class EinError(Exception):
    """An Einsummable failure: .code is the library's negative EIN_E* code
    (einsummable.EIN_ESHAPE, ...), .message its one-line message. Raised
    for the library's errors and for the checks this package makes before
    calling it. EinError(code, message) returns the subclass for `code`
    (EinShapeError for EIN_ESHAPE, ...), each also a ValueError,
    TypeError, OSError, MemoryError or RuntimeError as fits."""

    code: int
    message: str

    def __new__(cls, code: int, message: str = "") -> "EinError":
        if cls is EinError:
            cls = _BY_CODE.get(code, EinRuntimeError)
        # The builtin base whose memory layout the class has: OSError for
        # EinIOError, Exception for every other (MemoryError's own __new__
        # refuses a subclass that also derives from Exception).
        base: Any = OSError if issubclass(cls, OSError) else Exception
        return base.__new__(cls)  # type: ignore[no-any-return]

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return "%s(%d, %r)" % (type(self).__name__, self.code, self.message)

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (self.code, self.message))


class EinValueError(EinError, ValueError):
    """A bad argument (EIN_EINVAL): an unknown name, operator, option or
    value out of range."""


class EinShapeError(EinValueError):
    """Shapes or dtypes that do not fit (EIN_ESHAPE): matmul operands, a
    loaded array, sequence lengths that do not add up, ..."""


class EinParseError(EinValueError):
    """A malformed file or text (EIN_EPARSE): .ein, .npy, .safetensors,
    topology, saved program."""


class EinLimitError(EinValueError):
    """Over a limit (EIN_ELIMIT): a plan that does not fit a device's
    memory, a size too large."""


class EinNoPlanError(EinValueError):
    """No plan exists for this graph on this many devices (EIN_ENOPLAN)."""


class EinTypeError(EinError, TypeError):
    """An argument of the wrong Python type (code EIN_EINVAL): a list where
    a Tensor is expected, a float where an int is."""


class EinIOError(EinError, OSError):
    """Reading or writing a file failed (EIN_EIO)."""


class EinMemoryError(EinError, MemoryError):
    """Out of memory (EIN_ENOMEM)."""


class EinRuntimeError(EinError, RuntimeError):
    """A failure while compiling or running that is not the caller's input
    (EIN_EPROTO, EIN_EDEVICE, or a code this package does not know)."""


class EinUnsupportedError(EinRuntimeError, NotImplementedError):
    """Something this build or library cannot do (EIN_EUNSUPPORTED)."""


class WorkerError(EinRuntimeError):
    """A worker process failed during a run (EIN_EWORKER): the message
    names the device, its pid, the instruction and the operator. The
    program's workers are gone; compile again for a new session."""


class EinTimeoutError(WorkerError):
    """A worker or a run took longer than its timeout (EIN_ETIMEOUT)."""


class EinCancelledError(EinRuntimeError):
    """A run was cancelled (EIN_ECANCELED: Program.cancel() from another
    thread); the program stays usable and its outputs are unset."""


_BY_CODE: Dict[int, Type[EinError]] = {
    EIN_EINVAL: EinValueError,
    EIN_ESHAPE: EinShapeError,
    EIN_EPARSE: EinParseError,
    EIN_ELIMIT: EinLimitError,
    EIN_ENOPLAN: EinNoPlanError,
    EIN_EIO: EinIOError,
    EIN_ENOMEM: EinMemoryError,
    EIN_EPROTO: EinRuntimeError,
    EIN_EDEVICE: EinRuntimeError,
    EIN_EUNSUPPORTED: EinUnsupportedError,
    EIN_EWORKER: WorkerError,
    EIN_ETIMEOUT: EinTimeoutError,
    EIN_ECANCELED: EinCancelledError,
}

ERRORS = ("EinError", "EinValueError", "EinShapeError", "EinParseError", "EinLimitError",
          "EinNoPlanError", "EinTypeError", "EinIOError", "EinMemoryError", "EinRuntimeError",
          "EinUnsupportedError", "WorkerError", "EinTimeoutError", "EinCancelledError")
