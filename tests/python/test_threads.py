"""tests/python/test_threads.py — programs, processes, threads and signals
(docs/python.md, "Threads and signals"): several programs open at exit
close without a hang and leave nothing behind; programs opened by threads
that end live on; four threads hammering one program are serialised and
all right; cancel() from another thread; a Ctrl-C at the prompt leaves the
workers alone, and one during execute() cancels the run within a second,
raises KeyboardInterrupt and leaves the program usable; bad timeouts are
refused. Child scripts run in their own TMPDIR, so that what they leave
(processes, run directories) can be found by name."""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import einsummable as es

TOK, DM, DF = 16, 8, 12


def build_ffn():
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([TOK, DM]), name="x")
    w1 = g.insertTensor(es.tensorDesc([DM, DF]), name="w1")
    w2 = g.insertTensor(es.tensorDesc([DF, DM]), name="w2")
    g.save(g.matmul(g.unary(g.matmul(x, w1), "relu"), w2, name="y"))
    return g


def ffn_ref(x, w1, w2):
    x, w1, w2 = (a.astype(np.float64) for a in (x, w1, w2))
    return np.maximum(x @ w1, 0.0) @ w2


def inputs(seed):
    r = np.random.default_rng(seed)
    return (r.standard_normal((TOK, DM)).astype(np.float32),
            r.standard_normal((DM, DF)).astype(np.float32),
            r.standard_normal((DF, DM)).astype(np.float32))


def run_checked(prog, seed):
    x, w1, w2 = inputs(seed)
    prog.load("x", x)
    prog.load("w1", w1)
    prog.load("w2", w2)
    prog.execute()
    got = prog.offload("y")
    want = ffn_ref(x, w1, w2)
    assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want)) + 1e-5


def leftovers(tag, pid=None):
    """Processes whose command line names `tag` (workers: their run
    directory is under it; guards: forks of a child script stored under
    it), run directories under it, shared memory of process `pid`."""
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if tag in cmd:
            found.append("process %s: %s" % (p, cmd[:120]))
    found += ["directory " + d for d in os.listdir(tag) if d.startswith("einrun.")]
    if pid is not None:
        found += ["/dev/shm/" + s for s in os.listdir("/dev/shm")
                  if s.startswith("ein-%d-" % pid)]
    return found


def wait_no_leftovers(tag, pid=None, within=3.0):
    end = time.monotonic() + within
    while True:
        left = leftovers(tag, pid)
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.05)


PRELUDE = """
import sys, threading, time
import numpy as np
import einsummable as es

def ffn():
    g = es.createGraph()
    x = g.insertTensor(es.tensorDesc([16, 8]), name="x")
    w1 = g.insertTensor(es.tensorDesc([8, 12]), name="w1")
    w2 = g.insertTensor(es.tensorDesc([12, 8]), name="w2")
    g.save(g.matmul(g.unary(g.matmul(x, w1), "relu"), w2, name="y"))
    return g
"""


def child(tmp_path, body, **kw):
    """Start body (after PRELUDE) as a script under tmp_path, with
    TMPDIR=tmp_path, in its own process group (as a shell's job)."""
    script = tmp_path / "child.py"
    script.write_text(PRELUDE + body)
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, str(script)], env=env, cwd=str(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kw)


def test_programs_open_at_exit(tmp_path):
    """Three programs in the main thread and two opened by threads that
    have ended, all still open when the script ends: it exits at once
    (on main it hung at exit, and guards outlived it)."""
    p = child(tmp_path, """
progs = [es.compileGraph(ffn(), device=[0, 1]) for _ in range(3)]
for q in progs:
    q.execute()
def opener():
    q = es.compileGraph(ffn(), device=[0, 1])
    q.execute()
    progs.append(q)
ths = [threading.Thread(target=opener) for _ in range(2)]
for t in ths: t.start()
for t in ths: t.join()
time.sleep(0.3)
for q in progs:       # the threads' programs outlive their threads
    q.execute()
print("done", flush=True)
""")
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        pytest.fail("the script did not exit: %s" % err[-2000:])
    assert p.returncode == 0 and "done" in out, err[-2000:]
    left = wait_no_leftovers(str(tmp_path), p.pid)
    assert not left, left


def test_threads_share_programs():
    """Programs opened by threads that end work from the main thread; four
    threads hammering one program all get right results."""
    progs = []

    def opener():
        q = es.compileGraph(build_ffn(), device=[0, 1])
        run_checked(q, 1)
        progs.append(q)

    th = threading.Thread(target=opener)
    th.start()
    th.join()
    time.sleep(0.3)
    prog = progs[0]
    run_checked(prog, 2)

    x, w1, w2 = inputs(3)
    want = ffn_ref(x, w1, w2)
    prog.load("x", x)
    prog.load("w1", w1)
    prog.load("w2", w2)
    errors = []

    def hammer():
        try:
            for _ in range(8):
                prog.load("x", x)  # the same values from every thread
                prog.execute()
                got = prog.offload("y")
                assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want)) + 1e-5
        except BaseException as e:  # reported by the main thread
            errors.append(repr(e))

    ths = [threading.Thread(target=hammer) for _ in range(4)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    assert not errors, errors
    prog.close()


CHAIN = """
T, L = 384, 80
def chain():
    g = es.createGraph()
    t = g.insertTensor(es.tensorDesc([T, T]), name="x")
    w = g.insertTensor(es.tensorDesc([T, T]), name="w")
    for i in range(L):
        t = g.matmul(t, w, name="h%d" % i)
    g.save(t)
    return g
X = np.random.default_rng(5).standard_normal((T, T)).astype(np.float32)
def ready(prog):
    prog.load("x", X)
    prog.load("w", np.eye(T, dtype=np.float32))
def right(prog):
    return bool(np.array_equal(prog.offload("h%d" % (L - 1)), X))
"""


def test_ctrl_c_and_cancel(tmp_path):
    """SIGINT to the script's process group (what a terminal's Ctrl-C
    does): at the prompt the workers survive; during execute() the run is
    cancelled within a second, KeyboardInterrupt is raised, and the
    program is still usable and right. Then cancel() stops another
    thread's execute() (EinError EIN_ECANCELED), and the program runs right
    afterwards."""
    p = child(tmp_path, CHAIN + """
prog = es.compileGraph(chain(), device=[0, 1])
ready(prog)
prog.execute()
print("idle", flush=True)
try:
    time.sleep(60)
except KeyboardInterrupt:
    print("prompt-interrupt", flush=True)
prog.execute()
print("after-prompt", right(prog), flush=True)
inside = False
print("running", flush=True)
try:
    while True:
        inside = True
        prog.execute()
        inside = False
except KeyboardInterrupt:
    print("run-interrupt", inside, time.monotonic(), flush=True)
prog.execute()
print("after-run", right(prog), flush=True)
box = {}
def runner():
    try:
        t0 = time.monotonic()
        prog.execute()
        box["rc"], box["took"] = 0, time.monotonic() - t0
    except es.EinError as e:
        box["rc"] = e.code
th = threading.Thread(target=runner); th.start()
time.sleep(0.1)
prog.cancel()
th.join()
print("thread-cancel", box["rc"] == es.EIN_ECANCELED or box["took"] < 0.15, flush=True)
prog.execute()
print("after-cancel", right(prog), flush=True)
""")
    lines = []
    sent = None
    try:
        for line in p.stdout:
            lines.append(line.strip())
            if line.startswith("idle"):
                time.sleep(0.2)
                os.killpg(p.pid, signal.SIGINT)
            elif line.startswith("running"):
                time.sleep(0.3)
                sent = time.monotonic()
                os.killpg(p.pid, signal.SIGINT)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    err = p.stderr.read()
    text = "\n".join(lines) + "\n" + err[-2000:]
    assert p.returncode == 0, text
    assert "prompt-interrupt" in lines and "after-prompt True" in lines, text
    ri = [s for s in lines if s.startswith("run-interrupt")]
    assert ri and ri[0].split()[1] == "True", text  # it came during execute()
    assert float(ri[0].split()[2]) - sent < 1.0, text
    assert "after-run True" in lines, text
    assert "thread-cancel True" in lines and "after-cancel True" in lines, text
    left = wait_no_leftovers(str(tmp_path), p.pid)
    assert not left, left


def test_bad_timeouts():
    """Negative, NaN or non-numeric timeouts are refused, naming the
    option; 0 is the documented default."""
    for bad in (-1, -0.5, float("nan"), "10"):
        with pytest.raises(es.EinError) as e:
            es.compileGraph(build_ffn(), device=[0], worker_timeout=bad)
        assert e.value.code == es.EIN_EINVAL and "worker_timeout" in str(e.value), bad
    with pytest.raises(es.EinError) as e:
        es.compileGraph(build_ffn(), device=[0], run_timeout=-1)
    assert "run_timeout" in str(e.value)
    with es.compileGraph(build_ffn(), device=[0], worker_timeout=0) as prog:
        run_checked(prog, 4)


def test_connect_timeout(monkeypatch):
    """connect_timeout (seconds for a host's agent to reach the
    coordinator, ein_session_options.connect_timeout) is refused as the
    other timeouts are, naming it, and reaches the C session options as
    given (0 and None: the C default, 0)."""
    for bad in (-1, float("nan"), float("inf"), "10", True):
        with pytest.raises(es.EinError) as e:
            es.compileGraph(build_ffn(), device=[0], connect_timeout=bad)
        assert e.value.code == es.EIN_EINVAL and "connect_timeout" in str(e.value), bad
    from einsummable import _core
    real = _core._lib.ein_session_open
    seen = []

    def spy(c, o, out, err):
        seen.append(o._obj.connect_timeout)  # o: ctypes.byref(options)
        return real(c, o, out, err)

    monkeypatch.setattr(_core._lib, "ein_session_open", spy)
    for given, want in ((2.5, 2.5), (7, 7.0), (None, 0.0)):
        with es.compileGraph(build_ffn(), device=[0, 1], connect_timeout=given) as prog:
            run_checked(prog, 5)
        assert seen[-1] == want, (given, seen)
    assert len(seen) == 3, seen
