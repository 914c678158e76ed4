"""tests/python/test_inputs.py — inputs nobody gave (issue 22): a run with
some inputs loaded and others not raises, naming the missing ones; with
nothing loaded (a demo) or generate_missing=True they are generated and a
warning names them; a safetensors file that binds nothing raises."""

import warnings

import numpy as np
import pytest

import einsummable as es
from test_run import DM, TOK, _write_safetensors, build_ffn


def test_missing_input_raises_naming_it(rng):
    g, x, w1, w2, y = build_ffn()
    with es.compileGraph(g, device=[0, 1]) as prog:
        prog.load(x, rng.standard_normal((TOK, DM)).astype(np.float32))
        with pytest.raises(es.EinError) as e:
            prog.execute()
        assert "w1, w2" in str(e.value) and "no value" in str(e.value)
        # the program is still usable once they are given
        prog.load(w1, np.zeros(w1.shape, np.float32))
        prog.load(w2, np.zeros(w2.shape, np.float32))
        prog.execute()
        assert not np.any(prog.offload(y))


def test_nothing_loaded_generates_and_warns():
    g, x, w1, w2, y = build_ffn()
    with es.compileGraph(g, device=[0]) as prog:
        with pytest.warns(UserWarning, match="generating inputs x, w1, w2 from seed 1"):
            prog.execute()
        assert np.all(np.isfinite(prog.offload(y))) and np.any(prog.offload(y))


def test_generate_missing_names_what_it_generates(rng):
    g, x, w1, w2, y = build_ffn()
    with es.compileGraph(g, device=[0, 1], generate_missing=True, seed=7) as prog:
        prog.load(x, rng.standard_normal((TOK, DM)).astype(np.float32))
        with pytest.warns(UserWarning, match="generating inputs w1, w2 from seed 7"):
            prog.execute()
        with warnings.catch_warnings():  # said once, not at every run
            warnings.simplefilter("error")
            prog.execute()


def test_safetensors_binding_nothing_raises(tmp_path):
    g, x, w1, w2, y = build_ffn()
    st = tmp_path / "other.safetensors"
    _write_safetensors(st, {"model.w1": np.ones((3,), np.float32)})
    with es.compileGraph(g, device=[0]) as prog:
        with pytest.raises(es.EinError) as e:
            prog.load_safetensors(st)
        assert "no tensor of the file is named like an input" in str(e.value)
        assert "model.w1" in str(e.value)
