#!/bin/sh
# tools/quickstart.sh — install what the build needs (Debian packages), build,
# and run the paper's FFN over 4 devices. This is the README's first command.
#   sh tools/quickstart.sh [einrun arguments...]   (default: --gpus 0-3 examples/ffn.ein)
set -eu
cd "$(dirname "$0")/.."
PKGS="build-essential autoconf automake libtool pkg-config libzmq3-dev libmsgpack-dev libopenblas-dev libcmocka-dev coinor-libcbc-dev libjansson-dev libsodium-dev libpcre2-dev libutf8proc-dev libucx-dev iproute2 openssh-server openssh-client python3 python3-numpy python3-pytest python3-jinja2 python3-venv python3-setuptools python3-wheel mypy python3-fastapi python3-uvicorn"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
missing=""
for p in $PKGS; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "quickstart: installing$missing" >&2
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
fi
[ -x configure ] || autoreconf -fi
[ -f Makefile ] || ./configure
make -j"$(nproc)"
if [ $# -eq 0 ]; then
    set -- --gpus 0-3 examples/ffn.ein
fi
exec ./einrun "$@"
