"""setup.py — the native part of `pip install .` (pyproject.toml holds the
metadata).

Building the package's build_py step also provides libeinsummable and the
worker binaries, in one of two ways:

  * default (a clone of the repository): the project's own build. In
    $EIN_PIP_BUILDDIR (default: the source tree) run `autoreconf -fi` when
    there is no configure script, `./configure $EIN_CONFIGURE_FLAGS` when
    there is no Makefile, then `make` (an existing build is reused and only
    brought up to date) and `make install` into a temporary prefix. The
    library, einworker (einworker-cuda when built) and the rewrite rules
    are copied into the package under einsummable/_native/ with the layout
    of a prefix (lib/, bin/, share/), so the installed package needs
    nothing outside itself but the system libraries (ZeroMQ, msgpack,
    OpenBLAS, jansson, PCRE2, utf8proc).
  * EIN_PIP_LIBRARY=system: an installed libeinsummable found through
    pkg-config (PKG_CONFIG_PATH=PREFIX/lib/pkgconfig for another prefix);
    the package records its lib/ and bin/ folders and copies nothing.

Either way the package gets _paths.py (LIBDIR, BINDIR), which
einsummable._lib reads to load the library (docs/python.md).
"""

import glob
import os
import shutil
import subprocess
import sys
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

SRC = os.path.dirname(os.path.abspath(__file__))


def _say(msg):
    sys.stderr.write("einsummable: %s\n" % msg)
    sys.stderr.flush()


def _run(cmd, cwd):
    _say("running %s (in %s)" % (" ".join(cmd), cwd))
    r = subprocess.run(cmd, cwd=cwd)
    if r.returncode != 0:
        raise SystemExit("einsummable: '%s' failed with status %d in %s"
                         % (" ".join(cmd), r.returncode, cwd))


def _pkg_config(var):
    try:
        r = subprocess.run(["pkg-config", "--variable=" + var, "einsummable"],
                           capture_output=True, text=True)
    except OSError as e:
        raise SystemExit("einsummable: EIN_PIP_LIBRARY=system needs pkg-config: %s" % e)
    if r.returncode != 0 or not r.stdout.strip():
        raise SystemExit("einsummable: EIN_PIP_LIBRARY=system: pkg-config finds no einsummable "
                         "(install it with make install and set PKG_CONFIG_PATH to "
                         "PREFIX/lib/pkgconfig): %s" % r.stderr.strip())
    return r.stdout.strip()


def _system_paths():
    """(libdir, bindir) of an installed libeinsummable, absolute."""
    libdir = os.path.normpath(_pkg_config("libdir"))
    bindir = os.path.normpath(os.path.join(_pkg_config("exec_prefix"), "bin"))
    if not os.path.isfile(os.path.join(libdir, "libeinsummable.so")):
        raise SystemExit("einsummable: pkg-config says libdir %s, which has no "
                         "libeinsummable.so" % libdir)
    if not os.path.isfile(os.path.join(bindir, "einworker")):
        _say("warning: no einworker in %s; set EINWORKER when running" % bindir)
    return libdir, bindir


def _project_build(native):
    """Build with the project's Autotools build and lay the parts out under
    `native` as a prefix (lib/, bin/, share/)."""
    if not os.path.isfile(os.path.join(SRC, "configure.ac")):
        raise SystemExit("einsummable: %s is not a clone of Einsummable-C (no configure.ac); "
                         "install libeinsummable and build with EIN_PIP_LIBRARY=system" % SRC)
    bld = os.path.abspath(os.environ.get("EIN_PIP_BUILDDIR") or SRC)
    os.makedirs(bld, exist_ok=True)
    if not os.path.isfile(os.path.join(bld, "Makefile")):
        if not os.path.isfile(os.path.join(SRC, "configure")):
            _run(["autoreconf", "-fi"], SRC)
        flags = os.environ.get("EIN_CONFIGURE_FLAGS", "").split()
        _run([os.path.join(SRC, "configure"), "-q"] + flags, bld)
    jobs = os.environ.get("EIN_MAKE_JOBS") or str(os.cpu_count() or 1)
    _run(["make", "-j" + jobs], bld)
    stage = tempfile.mkdtemp(prefix="ein-pip.")
    try:
        _run(["make", "-s", "install", "prefix=" + stage], bld)
        if os.path.isdir(native):
            shutil.rmtree(native)
        lib = os.path.join(native, "lib")
        os.makedirs(lib)
        real = os.path.realpath(os.path.join(stage, "lib", "libeinsummable.so"))
        if not os.path.isfile(real):
            raise SystemExit("einsummable: make install left no libeinsummable.so in %s/lib "
                             "(configured with --disable-shared?)" % stage)
        shutil.copy2(real, os.path.join(lib, "libeinsummable.so"))
        os.makedirs(os.path.join(native, "bin"))
        # every backend's worker binary (ein_backend_info.worker: einworker,
        # einworker-cuda where CUDA was built)
        for p in sorted(glob.glob(os.path.join(stage, "bin", "einworker*"))):
            if os.path.isfile(p):
                shutil.copy2(p, os.path.join(native, "bin", os.path.basename(p)))
        share = glob.glob(os.path.join(stage, "share", "einsummable*"))
        for d in share:
            shutil.copytree(d, os.path.join(native, "share", os.path.basename(d)))
    finally:
        shutil.rmtree(stage, ignore_errors=True)


class BuildPyNative(build_py):
    """build_py, plus libeinsummable and its workers (see the module's doc)."""

    def run(self):
        super().run()
        pkg = os.path.join(self.build_lib, "einsummable")
        os.makedirs(pkg, exist_ok=True)
        # A build/ left by an earlier pip run may hold the other mode's parts.
        shutil.rmtree(os.path.join(pkg, "_native"), ignore_errors=True)
        mode = os.environ.get("EIN_PIP_LIBRARY", "build")
        if mode == "system":
            libdir, bindir = _system_paths()
        elif mode == "build":
            _project_build(os.path.join(pkg, "_native"))
            libdir, bindir = "_native/lib", "_native/bin"
        else:
            raise SystemExit("einsummable: EIN_PIP_LIBRARY=%r; expected 'build' (default) or "
                             "'system'" % mode)
        with open(os.path.join(pkg, "_paths.py"), "w") as f:
            f.write("# Written by pip install (setup.py): libeinsummable and einworker,\n"
                    "# relative to this package or absolute.\n")
            f.write("LIBDIR = %r\nBINDIR = %r\n" % (libdir, bindir))
        _say("library from %s, workers from %s" % (libdir, bindir))


class BinaryDistribution(Distribution):
    """The wheel holds a shared library and executables: platform-specific."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyNative}, distclass=BinaryDistribution)
