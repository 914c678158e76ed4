"""einsummable._core — the package's API in one namespace (see the
package's docstring), re-exported from the modules that hold it:
_dtypes.py (element types, from the library's dtype table), _graph.py
(graphs of abstract operators), _program.py (compiled programs and
sessions) and _util.py (errors and argument checks). _core.pyi types
these names; __init__.py imports the public ones from here."""

from ._dtypes import (_BLOCK_BYTES, _DTYPE_ALIASES, _DTYPE_BY_CODE, _DTYPES,  # noqa: F401
                      _bf16_from_f32, _dtype_name, _f32_from_bf16, dequantize, quantize)
from ._graph import (_BINARY, _REDUCE, _ROPE_STYLES, _UNARY, Graph, Tensor,  # noqa: F401
                     TensorDesc, _read_plan, _read_tensor, createGraph, tensorDesc)
from ._program import (Program, _backends, compileGraph, load_program)  # noqa: F401
from ._util import _check, _fail, _fail_type  # noqa: F401
from ._lib import lib as _lib  # noqa: F401
