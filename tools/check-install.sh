#!/bin/sh
# tools/check-install.sh — what issue 10 asks of an installation, checked:
# `make install` into PREFIX (default: a fresh temporary directory), a C
# program outside the tree (examples/ffn_session.c) compiled with
# pkg-config only, run; then the whole prefix moved elsewhere and the same
# program, einrun and einrun --rewrite (its rules) run from the new place.
# examples/ffn.py runs against the installed Python package.
# Run from a configured build tree:  sh tools/check-install.sh [PREFIX]
set -eu
srcdir=$(cd "$(dirname "$0")/.." && pwd)
build=$(pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/ein-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=${1:-$work/ein}
fail() { echo "check-install: FAIL: $*" >&2; exit 1; }
make -s -C "$build" install prefix="$prefix" >"$work/install.log" 2>&1 \
    || { tail -20 "$work/install.log"; fail "make install"; }
echo "check-install: installed into $prefix:"
(cd "$prefix" && find . -type f -o -type l | sort | sed 's/^/  /')
build_and_run() {
    PKG_CONFIG_PATH="$1/lib/pkgconfig" pkg-config --exists einsummable || fail "pkg-config finds no einsummable in $1"
    cflags=$(PKG_CONFIG_PATH="$1/lib/pkgconfig" pkg-config --cflags einsummable)
    libs=$(PKG_CONFIG_PATH="$1/lib/pkgconfig" pkg-config --libs einsummable)
    case "$cflags" in *"$srcdir"*) fail "pkg-config points into the source tree: $cflags";; esac
    mkdir -p "$work/outside"
    cp "$srcdir/examples/ffn_session.c" "$work/outside/"
    (cd "$work/outside" && cc ffn_session.c $cflags $libs -Wl,-rpath,"$1/lib" -o ffn_session) \
        || fail "compiling examples/ffn_session.c with pkg-config"
    (cd "$work/outside" && env -u EINWORKER -u EIN_BUILDDIR ./ffn_session) > "$work/out.txt" \
        || fail "ffn_session from $1: $(cat "$work/out.txt")"
    cat "$work/out.txt"
    [ "$(grep -c '^run [0-2]: y \[64, 32\] checksum' "$work/out.txt")" -eq 3 ] || fail "3 runs"
}
build_and_run "$prefix"
cp "$srcdir/examples/ffn.ein" "$work/outside/"
(cd "$work/outside" && "$prefix/bin/einrun" --cpu 2 ffn.ein >/dev/null 2>&1) || fail "installed einrun"
# The paper's Python FFN (examples/ffn.py) from the installed package, when
# the build installed one (a Python with NumPy was found).
pydir=$(ls -d "$prefix"/lib/python3*/*-packages 2>/dev/null | head -n 1)
if [ -n "$pydir" ] && [ -d "$pydir/einsummable" ]; then
    cp "$srcdir/examples/ffn.py" "$work/outside/"
    py=$(sed -n 's/^PYTHON = //p' "$build/Makefile")
    (cd "$work/outside" && env -u EINWORKER -u EIN_BUILDDIR PYTHONPATH="$pydir" "${py:-python3}" ffn.py) \
        > "$work/py.txt" 2>&1 || fail "examples/ffn.py with the installed package: $(cat "$work/py.txt")"
    cat "$work/py.txt"
    grep -q '^y: shape \[' "$work/py.txt" || fail "examples/ffn.py printed no result"
else
    echo "check-install: no Python package installed (no Python with NumPy): examples/ffn.py not run"
fi
# Relocated: move the whole prefix; everything must still find its parts.
mv "$prefix" "$work/moved"
build_and_run "$work/moved"
(cd "$work/outside" && env -u EIN_REWRITE_RULES "$work/moved/bin/einplan" --devices 2 --rewrite "$srcdir/examples/chain3.ein" >"$work/rw.txt" 2>&1) \
    || fail "relocated einplan --rewrite: $(cat "$work/rw.txt")"
(cd "$work/outside" && "$work/moved/bin/einrun" --cpu 2 ffn.ein >/dev/null 2>"$work/run.txt") \
    || fail "relocated einrun: $(cat "$work/run.txt")"
# einserve (docs/serving.md) finds the package beside it in the moved prefix.
if [ -f "$work/moved/bin/einserve" ]; then
    (cd "$work/outside" && env -u EIN_BUILDDIR PYTHONPATH= "$work/moved/bin/einserve" --help) \
        >"$work/serve.txt" 2>&1 && grep -q '^usage: einserve' "$work/serve.txt" \
        || fail "relocated einserve --help: $(cat "$work/serve.txt")"
fi
mv "$work/moved" "$prefix"
echo "check-install: PASS (installed, built outside the tree with pkg-config, ran; relocated and ran again)"
