"""tests/python/test_typing.py — the package's type hints serve a user:
`mypy --strict` passes on tests/python/typed_user.py (a small FFN script
with annotations) against the package as it is imported here, and the
script runs. Skipped without mypy (Debian: mypy)."""

import os
import shutil
import subprocess
import sys

import pytest

import einsummable as es

HERE = os.path.dirname(os.path.abspath(__file__))


def _mypy():
    r = subprocess.run([sys.executable, "-m", "mypy", "--version"], capture_output=True,
                       text=True)
    if r.returncode == 0:
        return [sys.executable, "-m", "mypy"]
    exe = shutil.which("mypy")
    if exe:
        return [exe]
    return None


@pytest.fixture(scope="module")
def mypy_strict(tmp_path_factory):
    """One `mypy --strict` over both typed scripts (each run spends its
    seconds loading NumPy's stubs): its exit status and output lines."""
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        # Type checking does not depend on how the library was built: it ran
        # in the plain make check, and mypy need not run under ASan.
        pytest.skip("sanitizer build: mypy runs in the plain make check")
    mypy = _mypy()
    if mypy is None:
        pytest.skip("no mypy (Debian: mypy)")
    tmp_path = tmp_path_factory.mktemp("mypy")
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(es.__file__)))
    env = dict(os.environ)
    cmd = mypy + ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
                  "--python-executable", sys.executable]
    if os.path.basename(pkg_parent) not in ("site-packages", "dist-packages"):
        env["MYPYPATH"] = pkg_parent  # the source tree's python/
    r = subprocess.run(cmd + [os.path.join(HERE, "typed_user.py"),
                              os.path.join(HERE, "typed_llama.py")], capture_output=True,
                       text=True, env=env, cwd=str(tmp_path), timeout=300)
    return r.returncode, r.stdout + r.stderr


def _mypy_clean(result, script):
    """No mypy report on SCRIPT; a failed run that names neither script
    (mypy itself broke) fails both."""
    rc, out = result
    errors = [l for l in out.splitlines() if ": error:" in l]
    assert not [l for l in errors if os.path.basename(l.split(":", 1)[0]) == script], out
    assert rc == 0 or errors, out


def test_typed_user_script_passes_mypy_strict(mypy_strict):
    _mypy_clean(mypy_strict, "typed_user.py")


def test_typed_user_script_runs(tmp_path):
    r = subprocess.run([sys.executable, os.path.join(HERE, "typed_user.py")],
                       capture_output=True, text=True, cwd=str(tmp_path), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "max |y - numpy|" in r.stdout


def test_typed_llama_script_passes_mypy_strict(mypy_strict, tmp_path):
    """A script that loads a checkpoint with es.llama type-checks under
    mypy --strict (issue 34), and runs."""
    _mypy_clean(mypy_strict, "typed_llama.py")
    sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
    import hf_zoo
    hf_zoo.gen("llama31", str(tmp_path), [4])
    r = subprocess.run([sys.executable, os.path.join(HERE, "typed_llama.py"), str(tmp_path)],
                       capture_output=True, text=True, cwd=str(tmp_path), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
