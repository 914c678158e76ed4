"""einsummable._util — what every module of the package uses: raising the
library's errors, and checking the common kinds of argument."""

import numpy

from . import _lib as L
from ._errors import EinError, EinTypeError

_lib = L.lib


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
