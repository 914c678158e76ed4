#!/bin/sh
# tests/python/test_python.sh — the Python package's pytest tests
# (tests/python/test_*.py) as TAP: one result per pytest test.
#
# The package is used from the source tree (PYTHONPATH=$EIN_SRCDIR/python)
# and loads libeinsummable from the build tree ($EIN_BUILDDIR/.libs). The
# Python is configure's ($EIN_PYTHON: one with NumPy, Debian's first); the
# whole file is skipped only when no Python with numpy and pytest exists,
# when the library was not built shared, or under the sanitizers without a
# loadable libasan. EIN_PY_INSTALLED=1 tests the package installed into
# $EIN_PYTHON's environment instead (tools/check-pip.sh).
set -u
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
B=${EIN_BUILDDIR:-$SRC}
PY=${EIN_PYTHON:-}
if [ -z "$PY" ] || [ "$PY" = ":" ]; then
    for p in /usr/bin/python3 python3; do
        if "$p" -c 'import numpy, pytest' >/dev/null 2>&1; then PY=$p; break; fi
    done
fi
if [ -z "$PY" ] || ! "$PY" -c 'import numpy, pytest' >/dev/null 2>&1; then
    echo "1..0 # SKIP no Python 3 with numpy and pytest (Debian: python3-numpy python3-pytest)"
    exit 0
fi
LIB="$B/.libs/libeinsummable.so"
if [ -z "${EIN_PY_INSTALLED:-}" ] && [ ! -f "$LIB" ]; then
    echo "1..0 # SKIP no shared libeinsummable in $B/.libs (configured --disable-shared?)"
    exit 0
fi
# A library built with ASan can only be loaded into a process whose first
# library is the ASan runtime: preload it (tests/e2e/lib.sh).
. "$SRC/tests/e2e/lib.sh"
if ! sanitized_python_env; then
    echo "1..0 # SKIP sanitizer build and no libasan.so to preload into Python"
    exit 0
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/ein-py.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
PYTHONDONTWRITEBYTECODE=1
export PYTHONDONTWRITEBYTECODE
if [ -n "${EIN_PY_INSTALLED:-}" ]; then
    # The package as installed into $EIN_PYTHON's environment
    # (tools/check-pip.sh): its own library and workers.
    PYTHONPATH="$SRC/tests/python"
    unset EIN_BUILDDIR EIN_LIBRARY EINWORKER
    export PYTHONPATH
else
    PYTHONPATH="$SRC/python:$SRC/tests/python${PYTHONPATH:+:$PYTHONPATH}"
    EIN_BUILDDIR=$B
    export PYTHONPATH EIN_BUILDDIR
fi
# -p no:cacheprovider: nothing written into a (read-only, under distcheck)
# source tree. The timeout only guards against a hang; the tests take
# seconds.
# EIN_PY_TESTS: only these files of tests/python (e.g. "test_api.py").
# EIN_PY_SKIP: not these files (CI's sanitizer pass, .ci/run); each is
# reported as one skipped TAP result naming it. A name that is not a file
# of tests/python is an error, not a silent no-op.
wanted=${EIN_PY_TESTS:-}
if [ -z "$wanted" ]; then
    for f in "$SRC"/tests/python/test_*.py; do wanted="$wanted ${f##*/}"; done
fi
for f in ${EIN_PY_SKIP:-}; do
    if [ ! -f "$SRC/tests/python/$f" ]; then
        echo "1..1"
        echo "not ok 1 - EIN_PY_SKIP names '$f', which is not a file of tests/python"
        exit 0
    fi
done
files="" skipped=""
for f in $wanted; do
    case " ${EIN_PY_SKIP:-} " in
    *" $f "*) skipped="$skipped $f" ;;
    *) files="$files $SRC/tests/python/$f" ;;
    esac
done
rc=0
: > "$T/out"
if [ -n "$files" ]; then
    (cd "$T" && timeout 1500 "$PY" -m pytest -p no:cacheprovider -v -rfE --tb=short \
        --basetemp="$T/tmp" --rootdir="$SRC/tests/python" $files) > "$T/out" 2>&1
    rc=$?
fi

# One TAP line per "path::test[param] RESULT" line of pytest -v.
awk -v rc="$rc" -v skip="$skipped" '
/::[^ ]+ (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)/ {
    for (i = 1; i <= NF; i++)
        if ($i ~ /^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)$/) { res = $i; break }
    name = $1; sub(/^.*\//, "", name)
    n++
    if (res == "PASSED" || res == "XFAIL") print "ok " n " - " name
    else if (res == "SKIPPED") print "ok " n " - " name " # SKIP"
    else { print "not ok " n " - " name " " res; bad++ }
}
END {
    ns = split(skip, sk, " ")
    for (i = 1; i <= ns; i++) { n++; print "ok " n " - " sk[i] " # SKIP not run: EIN_PY_SKIP" }
    if (rc != 0 && bad == 0) { n++; print "not ok " n " - pytest exited with status " rc }
    if (n == 0) { n++; print "not ok 1 - no pytest result" }
    print "1.." n
}' "$T/out"
sed 's/^/# /' "$T/out"
exit 0
