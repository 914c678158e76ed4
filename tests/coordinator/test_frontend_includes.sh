#!/bin/sh
# tests/coordinator/test_frontend_includes.sh — the front ends speak to the
# library through its public API only (issue 23), TAP.
#
# einrun's and einplan's sources (their _SOURCES in tools/planner.am) may
# include, of the project's headers, only include/einsummable/*.h, the
# front ends' internal header coordinator/ein_frontend.h, einrun's own
# tools/einrun_int.h, config.h and the
# small generic utilities of common/ that ein_frontend.h names as the
# front-end toolkit. ein_frontend.h itself exposes no internal header. The
# library prints no "einrun: " / "einplan: " prefix, has no *_cli function,
# and leaves $EIN_EXCHANGE_CHUNKS to the front ends. Test 1 shows the check
# can fail.
src=${EIN_SRCDIR:-..}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() {
    n=$((n + 1)); echo "not ok $n - $1"; fails=$((fails + 1))
    [ -s "$tmp/why" ] && sed 's/^/# /' "$tmp/why" | head -20
}

ALLOWED='config.h
coordinator/ein_frontend.h
tools/einrun_int.h
common/ir/ein_box.h
common/base/ein_clock.h
common/base/ein_error.h
common/base/ein_knob.h
common/io/ein_npy.h
common/process/ein_progress.h'

# bad_includes FILE...: print "FILE: HEADER" for each project header a file
# includes that is not allowed (a <...> include counts when it names a file
# of the source tree, as -I$(top_srcdir) would find it).
bad_includes() {
    for f in "$@"; do
        sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*\([<"]\)\([^>"]*\)[>"].*/\1\2/p' "$f" |
        while read -r inc; do
            kind=$(printf '%s' "$inc" | cut -c1)
            h=$(printf '%s' "$inc" | cut -c2-)
            case $h in
            include/einsummable/*.h|einsummable/*.h) continue ;;
            esac
            if printf '%s\n' "$ALLOWED" | grep -qxF "$h"; then
                continue
            fi
            if [ "$kind" = '<' ] && [ ! -e "$src/$h" ]; then
                continue    # a system header
            fi
            echo "$f: $h"
        done
    done
}

# The front ends' sources, as the build lists them.
sources() {   # sources PROGRAM FRAGMENT: the words of PROGRAM_SOURCES (with its
              # continuation lines) that name .c and .h files
    awk -v v="$1_SOURCES" '$1 == v { on = 1 } on { print; if ($0 !~ /\\$/) on = 0 }' \
        "$src/$2" | tr ' \t\\' '\n\n\n' | grep -E '\.(c|h)$' | sed "s|^|$src/|"
}
srcs="$(sources einrun tools/planner.am) $(sources einplan tools/planner.am)"

echo "1..7"

# 1: the check can fail (a planted front end including an internal header).
printf '#include "coordinator/compile/ein_compile_int.h"\n#include <planner/pl_graph.h>\n#include <stdio.h>\n#include "include/einsummable/einsummable.h"\n' > "$tmp/planted.c"
bad_includes "$tmp/planted.c" > "$tmp/why"
if [ "$(wc -l < "$tmp/why")" -eq 2 ] && grep -q 'ein_compile_int.h' "$tmp/why" &&
   grep -q 'pl_graph.h' "$tmp/why"; then ok "the check finds a planted internal include"
else not_ok "the check finds a planted internal include"; fi

# 2: the build's lists name the front ends' files.
: > "$tmp/why"
if echo "$srcs" | grep -q 'einrun\.c' && echo "$srcs" | grep -q 'einrun_opts\.c' &&
   echo "$srcs" | grep -q 'einplan\.c'; then ok "einrun's and einplan's sources found"
else echo "$srcs" > "$tmp/why"; not_ok "einrun's and einplan's sources found"; fi

# 3: they include only the public API and ein_frontend.h.
# shellcheck disable=SC2086
bad_includes $srcs > "$tmp/why"
if [ ! -s "$tmp/why" ]; then ok "einrun and einplan include only public headers and ein_frontend.h"
else not_ok "einrun and einplan include only public headers and ein_frontend.h"; fi

# 4: ein_frontend.h exposes no internal header.
ALLOWED='common/process/ein_progress.h'
bad_includes "$src/coordinator/ein_frontend.h" > "$tmp/why"
if [ -f "$src/coordinator/ein_frontend.h" ] && [ ! -s "$tmp/why" ]; then ok "ein_frontend.h includes only the public API"
else not_ok "ein_frontend.h includes only the public API"; fi

LIB="$src/common $src/coordinator $src/exchange $src/planner $src/kernels $src/worker"
# 5: no front end's prefix in library messages.
grep -rn --include='*.c' --include='*.h' --include='*.cu' -e '"einrun: ' -e '"einplan: ' $LIB > "$tmp/why"
if [ ! -s "$tmp/why" ]; then ok "no einrun: or einplan: prefix in the library"
else not_ok "no einrun: or einplan: prefix in the library"; fi

# 6: no *_cli function in the library.
grep -rnE --include='*.c' --include='*.h' '^[a-z].*[a-z0-9]_cli\(' $LIB > "$tmp/why"
if [ ! -s "$tmp/why" ]; then ok "no *_cli function in the library"
else not_ok "no *_cli function in the library"; fi

# 7: $EIN_EXCHANGE_CHUNKS is read by the front ends only.
grep -rn --include='*.c' --include='*.h' 'getenv("EIN_EXCHANGE_CHUNKS")' $LIB > "$tmp/why"
if [ ! -s "$tmp/why" ]; then ok "\$EIN_EXCHANGE_CHUNKS read by the front ends only"
else not_ok "\$EIN_EXCHANGE_CHUNKS read by the front ends only"; fi

[ "$fails" -eq 0 ]
