"""tests/python/test_saved.py — saved programs (Program.save,
es.load_program): a program saved here runs in another process (a
subprocess) and gives the same outputs as here, with no compile there;
bad files and mismatches raise the right exception with a message naming
what differs. And progress lines: on a terminal (a pty) a run shows
"running: ..." and erases it; into a pipe nothing is printed."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import einsummable as es

T, D, F = 12, 8, 16


def ffn():
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([T, D], "f32"), name="x")
    w1 = g.insertTensor(es.tensorDesc([D, F], "f32"), name="w1")
    w2 = g.insertTensor(es.tensorDesc([F, D], "f32"), name="w2")
    y = g.matmul(g.relu(x @ w1), w2, name="y")
    g.save(y)
    return g


def inputs():
    rng = np.random.default_rng(7)
    return {"x": rng.standard_normal((T, D)).astype(np.float32),
            "w1": rng.standard_normal((D, F)).astype(np.float32),
            "w2": rng.standard_normal((F, D)).astype(np.float32)}


def env():
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return e


def test_saved_program_runs_in_another_process(tmp_path):
    ins = inputs()
    path = tmp_path / "ffn.einprog"
    with es.compileGraph(ffn(), device=[0, 1], schedule_mode="search") as prog:
        for k, v in ins.items():
            prog.load(k, v)
        prog.execute()
        here = prog.offload("y")
        explain = prog.explain()
        prog.save(path)
        prog.save(tmp_path / "again.einprog")
    # Deterministic: the same program gives the same bytes.
    assert path.read_bytes() == (tmp_path / "again.einprog").read_bytes()
    for k, v in ins.items():
        np.save(tmp_path / (k + ".npy"), v)
    script = textwrap.dedent("""
        import sys, numpy as np, einsummable as es
        d = sys.argv[1]
        with es.load_program(d + "/ffn.einprog") as p:
            assert p.ndevices == 2 and p.devices == [0, 1], p.devices
            for k in ("x", "w1", "w2"):
                p.load(k, d + "/" + k + ".npy")
            p.execute()
            np.save(d + "/y.npy", p.offload("y"))
            open(d + "/explain.txt", "w").write(p.explain())
        """)
    r = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                       text=True, env=env(), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    there = np.load(tmp_path / "y.npy")
    assert np.array_equal(here, there)
    assert (tmp_path / "explain.txt").read_text() == explain
    # And right, not only equal: y = relu(x w1) w2.
    want = np.maximum(ins["x"].astype(np.float64) @ ins["w1"], 0) @ ins["w2"]
    assert np.max(np.abs(there - want)) <= 1e-4


def test_load_checks(tmp_path):
    path = str(tmp_path / "v100.einprog")
    with es.compileGraph(ffn(), device=[0, 1, 2, 3], topology="dgx-v100") as prog:
        prog.save(path)
    with es.load_program(path) as p:  # found as compiled: the same built-in
        assert p.topology()[0] == "dgx-v100"
        assert p.predict().time > 0
    with pytest.raises(es.EinRuntimeError) as e:
        es.load_program(path, topology="dgx-a100")
    assert e.value.code == es.EIN_EDEVICE
    assert "topology differs" in str(e.value) and "dgx-a100" in str(e.value)
    with pytest.raises(es.EinValueError, match="device count differs"):
        es.load_program(path, device=[0, 1])
    with pytest.raises(es.EinTypeError, match="list of devices"):
        es.load_program(path, device=4)
    bad = tmp_path / "bad.einprog"
    bad.write_bytes(b"not a program at all")
    with pytest.raises(es.EinParseError, match="not a saved einsummable program"):
        es.load_program(bad)
    bad.write_bytes(open(path, "rb").read()[:200])
    with pytest.raises(es.EinParseError, match="not a valid saved program"):
        es.load_program(bad)
    with pytest.raises(es.EinIOError):
        es.load_program(tmp_path / "missing.einprog")
    fifo = tmp_path / "fifo.einprog"
    os.mkfifo(fifo)
    with pytest.raises(es.EinIOError, match="FIFO"):
        es.load_program(fifo)
    with pytest.raises(es.EinTypeError):
        es.load_program(None)  # type: ignore[arg-type]
    prog = es.compileGraph(ffn(), device=[0])
    import pickle
    with pytest.raises(es.EinTypeError, match="program.save"):
        pickle.dumps(prog)
    prog.close()
    with pytest.raises(es.EinValueError, match="closed"):
        prog.save(path)


_RUN = textwrap.dedent("""
    import einsummable as es, numpy as np
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([8, 8], "f32"), name="x")
    g.save(g.relu(x, name="y"))
    with es.compileGraph(g, device=[0, 1]%s) as p:
        p.load("x", np.ones((8, 8), np.float32))
        p.execute()
    print("ran")
    """)


def _run_with_stderr_on_pty(code, extra_env):
    import pty
    import select
    master, slave = pty.openpty()
    e = env()
    e.update(extra_env)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=slave, env=e)
    os.close(slave)
    got = b""
    while True:
        r, _, _ = select.select([master], [], [], 60)
        if not r:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        got += chunk
    out, _ = proc.communicate(timeout=60)
    os.close(master)
    assert proc.returncode == 0, got
    assert b"ran" in out
    return got


def test_progress_on_a_terminal_and_not_in_a_pipe():
    # A run shows its line only after $EIN_PROGRESS_AFTER seconds (1 by
    # default); 0 shows it at once, so that the test need not wait.
    got = _run_with_stderr_on_pty(_RUN % "", {"EIN_PROGRESS_AFTER": "0"})
    assert b"running: " in got, got
    # The line is erased once the run ends: the last thing written for it.
    tail = got[got.rindex(b"running: "):]
    assert b"\r\x1b[K" in tail, got
    # progress=False: nothing, even on a terminal.
    got = _run_with_stderr_on_pty(_RUN % ", progress=False", {"EIN_PROGRESS_AFTER": "0"})
    assert b"running: " not in got and b"\x1b[K" not in got, got
    # Stderr into a pipe: no progress, no control characters.
    e = env()
    e["EIN_PROGRESS_AFTER"] = "0"
    r = subprocess.run([sys.executable, "-c", _RUN % ""], capture_output=True, env=e,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert b"running: " not in r.stderr and b"\x1b[K" not in r.stderr, r.stderr
    assert b"planning" not in r.stderr


def test_any_flipped_bit_is_refused(tmp_path):
    """A checksum over the whole file: one bit flipped anywhere (200 places
    drawn with a fixed seed, and the first and last bytes) is an
    EinParseError before anything of the file is used."""
    path = tmp_path / "ffn.einprog"
    with es.compileGraph(ffn(), device=[0, 1]) as prog:
        prog.save(str(path))
    good = path.read_bytes()
    rng = np.random.default_rng(34)
    places = sorted(set(rng.integers(0, len(good), 200).tolist()) | {0, len(good) - 1})
    bad = tmp_path / "bad.einprog"
    for k in places:
        b = bytearray(good)
        b[k] ^= 1 << int(rng.integers(0, 8))
        bad.write_bytes(bytes(b))
        with pytest.raises(es.EinParseError, match="magic" if k < 8 else "checksum"):
            es.load_program(bad)
    with es.load_program(path) as p:  # the file itself still loads
        assert p.predict().time > 0
