#!/bin/sh
# tools/check-pip.sh — `pip install .` as a Python user does it, checked: a
# fresh virtual environment (with the system's site packages, for Debian's
# numpy, pytest and setuptools: there is no PyPI here), the package
# installed from this clone with the project's build of libeinsummable
# (setup.py reuses the configured build tree: run `make` first), then, from
# outside the tree and without PYTHONPATH or EIN_BUILDDIR, the version, the
# typed user script and the Python tests against the installed package.
# CI (.ci/run) runs it; about 40 s on 2 cores with the build done.
#   sh tools/check-pip.sh [PYTHON]      (default: /usr/bin/python3)
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
py=${1:-/usr/bin/python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/ein-pip.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "check-pip: FAIL: $*" >&2; exit 1; }
"$py" -m venv --system-site-packages "$work/venv" || fail "$py -m venv (Debian: python3-venv)"
vpy="$work/venv/bin/python"
# EIN_PIP_BUILDDIR: the build tree to reuse (default: the source tree).
(cd "$src" && "$vpy" -m pip install --no-build-isolation --no-deps --no-index -q .) \
    >"$work/pip.log" 2>&1 || { tail -30 "$work/pip.log"; fail "pip install ."; }
cd "$work"
unset PYTHONPATH EIN_BUILDDIR EIN_LIBRARY EINWORKER || true
v=$("$vpy" -m einsummable --version) || fail "python -m einsummable --version"
echo "check-pip: installed $v: $("$vpy" -c 'import einsummable as es; print(es.__file__, es.library_path)')"
case $("$vpy" -c 'import einsummable as es; print(es.library_path)') in
"$work/venv/"*) ;;
*) fail "the installed package loads a library outside the venv" ;;
esac
"$vpy" "$src/tests/python/typed_user.py" || fail "tests/python/typed_user.py"
# the einserve command pip installed (pyproject.toml's [project.scripts])
"$work/venv/bin/einserve" --help 2>&1 | grep -q '^usage: einserve' || fail "venv/bin/einserve --help"
# The Python tests against the installed package (test_python.sh with
# EIN_PY_INSTALLED: no source tree on the path). The whole suite ran in
# make check against the build tree; here the files that concern an
# installed package (EIN_PY_TESTS="" runs them all: about a minute).
out=$(EIN_PY_INSTALLED=1 EIN_PYTHON="$vpy" EIN_SRCDIR="$src" \
      EIN_PY_TESTS="${EIN_PY_TESTS-test_api.py test_typing.py test_docs.py test_install.py}" \
      sh "$src/tests/python/test_python.sh")
echo "$out" | grep -v '^#' | grep -q '^not ok' && { echo "$out" | tail -60; fail "Python tests in the venv"; }
echo "check-pip: PASS ($(echo "$out" | grep -c '^ok') Python tests passed in the venv)"
