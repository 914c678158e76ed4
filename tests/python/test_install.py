"""tests/python/test_install.py — how the package finds libeinsummable:
an installed layout (package + _paths.py written by `make install`) that is
then moved elsewhere as a whole, and the message when nothing is found."""

import os
import shutil
import subprocess
import sys

import einsummable as es

PKG = os.path.dirname(os.path.abspath(es.__file__))


def _copy_package(dst):
    """The package's .py files into dst, writable (under make distcheck the
    source tree is read-only, and copytree would copy that mode)."""
    os.makedirs(dst)
    for f in os.listdir(PKG):
        if f.endswith(".py") and f != "_paths.py":
            shutil.copyfile(os.path.join(PKG, f), os.path.join(dst, f))


def _env():
    env = dict(os.environ)
    for k in ("EIN_BUILDDIR", "EIN_LIBRARY", "PYTHONPATH", "EINWORKER"):
        env.pop(k, None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _fake_prefix(root):
    """A prefix laid out as `make install` does (lib/, bin/ and the package
    under lib/python3/dist-packages), with _paths.py as install writes it."""
    site = os.path.join(root, "lib", "python3", "dist-packages")
    pkg = os.path.join(site, "einsummable")
    _copy_package(pkg)
    libdir, bindir = os.path.join(root, "lib"), os.path.join(root, "bin")
    os.makedirs(bindir)
    shutil.copyfile(es.library_path, os.path.join(libdir, "libeinsummable.so"))
    with open(os.path.join(pkg, "_paths.py"), "w") as f:
        f.write("LIBDIR = %r\nBINDIR = %r\n" % (os.path.relpath(libdir, pkg),
                                                os.path.relpath(bindir, pkg)))
    return site


def test_installed_layout_survives_a_move(tmp_path):
    site = _fake_prefix(str(tmp_path / "prefix"))
    moved = tmp_path / "elsewhere"
    os.rename(tmp_path / "prefix", moved)
    site = site.replace(str(tmp_path / "prefix"), str(moved))
    env = _env()
    env["PYTHONPATH"] = site
    r = subprocess.run([sys.executable, "-c", "import einsummable as es; print(es.library_path)"],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(moved / "lib" / "libeinsummable.so")


def test_no_library_is_a_clear_import_error(tmp_path):
    pkg = tmp_path / "einsummable"
    _copy_package(str(pkg))
    env = _env()
    env["PYTHONPATH"] = str(tmp_path)
    env["EIN_LIBRARY"] = str(tmp_path / "nothing.so")
    env["LD_LIBRARY_PATH"] = str(tmp_path)
    r = subprocess.run([sys.executable, "-c", "import einsummable"], capture_output=True,
                       text=True, env=env, cwd=str(tmp_path), timeout=60)
    if r.returncode == 0:
        # The system loader found an installed libeinsummable: nothing to test.
        return
    assert "cannot load libeinsummable" in r.stderr and "EIN_LIBRARY" in r.stderr
