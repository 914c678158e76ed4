"""tests/python/test_abi.py — the ctypes structs of einsummable._lib have the
layout of the C header's: every field at the same offset with the same
size, and (option structs) at least the C size. The C side is printed by
tests/python/py_abi, built with the header. The dtype and operator tables
the library exports (ein_dtype_row, ein_op_row) hold what is stated of them
here, and the package's lists are built from them."""

import ctypes
import os
import subprocess

import numpy
import pytest

from einsummable import _lib as L

STRUCTS = {
    "ein_error": L.ein_error, "ein_tensor_desc": L.ein_tensor_desc,
    "ein_plan_options": L.ein_plan_options, "ein_compile_options": L.ein_compile_options,
    "ein_backend_info": L.ein_backend_info,
    "ein_session_options": L.ein_session_options, "ein_run_stats": L.ein_run_stats,
    "ein_prediction": L.ein_prediction,
    "ein_dtype_entry": L.ein_dtype_entry, "ein_op_entry": L.ein_op_entry,
}


def c_layout():
    exe = os.path.join(os.environ.get("EIN_BUILDDIR", "."), "tests", "python", "py_abi")
    if not os.path.exists(exe):
        pytest.skip("no %s (built by make check)" % exe)
    out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
    fields, sizes, consts = {}, {}, {}
    for line in out.splitlines():
        parts = line.split()
        if parts[0] == "const":
            consts[parts[1]] = int(parts[2])
        elif parts[1] == "sizeof":
            sizes[parts[0]] = int(parts[2])
        else:
            fields[(parts[0], parts[1])] = (int(parts[2]), int(parts[3]))
    return fields, sizes, consts


def test_constants_match_the_header():
    _, _, consts = c_layout()
    from einsummable import _dtypes, _graph
    dt = {"EIN_F32": "f32", "EIN_F16": "f16", "EIN_BF16": "bf16"}
    rope = {"EIN_ROPE_INTERLEAVED": "interleaved", "EIN_ROPE_HALF": "half"}
    for name, value in consts.items():
        if name in dt:
            assert _dtypes._DTYPES[dt[name]][0] == value, name
        elif name in rope:
            assert _graph._ROPE_STYLES[rope[name]] == value, name
        else:
            assert getattr(L, name) == value, name


def test_struct_layouts_match_the_header():
    fields, sizes, _ = c_layout()
    assert sizes.pop("ein_dtype") == ctypes.sizeof(ctypes.c_int)
    seen = set()
    for (struct, field), (off, size) in fields.items():
        cls = STRUCTS[struct]
        f = getattr(cls, field)
        assert (f.offset, f.size) == (off, size), "%s.%s: ctypes %d+%d, C %d+%d" % (
            struct, field, f.offset, f.size, off, size)
        seen.add((struct, field))
    for name, cls in STRUCTS.items():
        mine = [f[0] for f in cls._fields_ if not f[0].startswith("_")]
        assert set(mine) == {f for s, f in seen if s == name}, name
        spare = getattr(cls, "_spare", None)
        end = spare.offset if spare is not None else ctypes.sizeof(cls)
        # C may add padding at the end; ctypes must cover the whole struct.
        assert end <= sizes[name] + 8 and ctypes.sizeof(cls) >= sizes[name], name


def _dtype_rows():
    rows = []
    for i in range(L.lib.ein_dtype_count()):
        e = L.ein_dtype_entry()
        assert L.lib.ein_dtype_row(i, ctypes.byref(e)) == 0, i
        rows.append(e)
    return rows


def test_dtype_table_is_the_libraries_and_python_uses_it():
    """The exported dtype table against facts stated independently here
    (NumPy's item sizes, ggml's block layouts: an f16 scale and 32 int8 or
    16 bytes of nibbles), and Python's lists built from exactly it."""
    from einsummable import _dtypes
    rows = _dtype_rows()
    names = [r.name.decode() for r in rows]
    assert names == ["f32", "f16", "bf16", "i32", "i64", "q8_0", "q4_0", "f8e4m3"]
    size = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4, "i64": 8}
    for r in rows:
        n = r.name.decode()
        if n in size:
            assert (r.size, r.block, r.block_bytes) == (size[n], 1, size[n]), n
            assert numpy.dtype(r.npy.decode()).itemsize == size[n], n
            assert r.is_float == (n in ("f32", "f16", "bf16")), n
        else:
            assert (r.size, r.npy, r.st, r.is_float) == (0, None, None, 0), n
            assert r.block == (128 if n == "f8e4m3" else 32), n
    assert rows[5].block_bytes == 2 + 32 and rows[6].block_bytes == 2 + 16
    assert rows[7].block_bytes == 4 + 128   # f8e4m3: f32 scale, 128 e4m3 bytes
    assert list(_dtypes._DTYPES) == names
    assert [c for c, _ in _dtypes._DTYPES.values()] == list(range(len(rows)))
    assert _dtypes._BLOCK_BYTES == {"q8_0": 34, "q4_0": 18, "f8e4m3": 132}
    assert _dtypes._DTYPES["bf16"][1] == numpy.uint16  # raw bits: NumPy has no bf16
    assert _dtypes._DTYPES["q4_0"][1] == numpy.uint8
    assert _dtypes._DTYPES["i64"][1] == numpy.int64


def test_table_rows_out_of_range_are_refused():
    e, o = L.ein_dtype_entry(), L.ein_op_entry()
    for i in (-1, L.lib.ein_dtype_count(), 1 << 30):
        assert L.lib.ein_dtype_row(i, ctypes.byref(e)) == L.EIN_EINVAL, i
    for i in (-1, L.lib.ein_op_count(), 1 << 30):
        assert L.lib.ein_op_row(i, ctypes.byref(o)) == L.EIN_EINVAL, i
    assert L.lib.ein_dtype_row(0, None) == L.EIN_EINVAL
    assert L.lib.ein_op_row(0, None) == L.EIN_EINVAL


def test_op_table_is_the_libraries_and_python_uses_it():
    """Every exported name is one the graph API takes (the op runs), Python's
    lists are the table's, and a name not in it is refused by name."""
    import einsummable as es
    from einsummable import _graph
    rows = []
    for i in range(L.lib.ein_op_count()):
        o = L.ein_op_entry()
        assert L.lib.ein_op_row(i, ctypes.byref(o)) == 0, i
        rows.append((o.name.decode(), o.op_class, o.takes_c))
    by = {k: [n for n, c, _ in rows if c == k]
          for k in (L.EIN_OP_UNARY, L.EIN_OP_BINARY, L.EIN_OP_REDUCE)}
    assert len(rows) == sum(len(v) for v in by.values())
    assert tuple(by[L.EIN_OP_UNARY]) == _graph._UNARY
    assert tuple(by[L.EIN_OP_BINARY]) == _graph._BINARY
    assert tuple(by[L.EIN_OP_REDUCE]) == _graph._REDUCE == ("sum", "max")
    assert set(_graph._BINARY) == {"add", "sub", "mul", "div", "maximum"}
    assert {"relu", "silu", "gelu", "gelu_exact", "exp", "scale", "addc"} <= set(_graph._UNARY)
    assert {n for n, c, t in rows if t} == {"scale", "addc"}
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([4, 8]), "x")
    for n in by[L.EIN_OP_UNARY]:
        assert g.unary(x, n, 0.5).shape == (4, 8), n
    for n in by[L.EIN_OP_BINARY]:
        assert g.binary(x, x, n).shape == (4, 8), n
    for n in by[L.EIN_OP_REDUCE]:
        assert g.reduce(x, n, 1).shape == (4,), n
    for bad, call in (("cube", lambda: g.unary(x, "cube")),
                      ("pow", lambda: g.binary(x, x, "pow")),
                      ("mean", lambda: g.reduce(x, "mean", 1))):
        with pytest.raises(es.EinError) as e:
            call()
        assert e.value.code == es.EIN_EINVAL and bad in str(e.value), bad
    # The C API itself refuses it too, naming the table's names.
    err = L.ein_error()
    gp = g._p
    assert L.lib.ein_graph_reduce(gp, None, b"mean", 1, x.id, ctypes.byref(err)) < 0
    assert "expected sum or max" in err.msg.decode()


def _stub_literal(name):
    import ast
    from einsummable import _core
    with open(os.path.join(os.path.dirname(_core.__file__), "_core.pyi")) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id == name:
            return {e.value for e in node.value.slice.elts}
    raise AssertionError("_core.pyi has no " + name)


def test_type_stub_literals_are_the_tables():
    """A type checker needs the names spelled out in _core.pyi: they are the
    library's tables' (and NumPy's names of its element types), no more."""
    from einsummable import _dtypes, _graph
    assert _stub_literal("UnaryOp") == set(_graph._UNARY)
    assert _stub_literal("BinaryOp") == set(_graph._BINARY)
    assert _stub_literal("DType") == set(_dtypes._DTYPES) | set(_dtypes._DTYPE_ALIASES)
