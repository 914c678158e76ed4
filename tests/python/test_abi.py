"""tests/python/test_abi.py — the ctypes structs of einsummable._lib have the
layout of the C header's: every field at the same offset with the same
size, and (option structs) at least the C size. The C side is printed by
tests/python/py_abi, built with the header."""

import ctypes
import os
import subprocess

import pytest

from einsummable import _lib as L

STRUCTS = {
    "ein_error": L.ein_error, "ein_tensor_desc": L.ein_tensor_desc,
    "ein_plan_options": L.ein_plan_options, "ein_compile_options": L.ein_compile_options,
    "ein_backend_info": L.ein_backend_info,
    "ein_session_options": L.ein_session_options, "ein_run_stats": L.ein_run_stats,
    "ein_prediction": L.ein_prediction,
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
    from einsummable import _core
    dt = {"EIN_F32": "f32", "EIN_F16": "f16", "EIN_BF16": "bf16"}
    rope = {"EIN_ROPE_INTERLEAVED": "interleaved", "EIN_ROPE_HALF": "half"}
    for name, value in consts.items():
        if name in dt:
            assert _core._DTYPES[dt[name]][0] == value, name
        elif name in rope:
            assert _core._ROPE_STYLES[rope[name]] == value, name
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
