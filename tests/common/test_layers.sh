#!/bin/sh
# tests/common/test_layers.sh — no folder-to-folder include circle (issue 35), TAP.
#
# The source folders stand in one order, lowest first (ORDER below; the
# layering of docs/design.md): a file may include headers of its own folder
# and of folders earlier in the order, never of a later one, so no two
# folders include each other, directly or around a longer circle. Edges are
# read from every #include "X" and #include <X> of the .c, .h, .cu and .cuh
# files (and the .def files they include) whose X names a file of the tree
# (as -I$(top_srcdir) or -I$(top_srcdir)/include finds it); system headers
# are not edges, nor config.h (generated at the top). tests/ may include anything and is not read. Test 1 shows
# the check can fail; test 4 checks the same graph without the order
# (tsort finds any loop).
src=${EIN_SRCDIR:-..}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() {
    n=$((n + 1)); echo "not ok $n - $1"; fails=$((fails + 1))
    [ -s "$tmp/why" ] && sed 's/^/# /' "$tmp/why" | head -30
}

# Lowest first. A new folder gets its place here (and in docs/design.md).
ORDER='include/einsummable
common/base
common/ir
common/io
common/process
kernels
kernels/cpu
kernels/cuda
worker
planner
planner/ops
planner/rewrite
exchange
coordinator/predict
coordinator/compile
coordinator
coordinator/run
node
tools
examples'
ROOTS='include common kernels worker planner exchange coordinator node tools examples'

# RANKS: "FOLDER RANK" per line, for the awk scripts below.
RANKS=$(printf '%s\n' "$ORDER" | awk '{ print $0, NR }')
# The source files, and every folder holding one.
for r in $ROOTS; do
    [ -d "$src/$r" ] && (cd "$src" && find "$r" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \
        -o -name '*.cuh' -o -name '*.def' \))
done | LC_ALL=C sort > "$tmp/files"
sed 's|/[^/]*$||' "$tmp/files" | LC_ALL=C sort -u > "$tmp/folders"

# edges: "FROM TO FILE HEADER" for every include of another folder's file.
while read -r f; do
    d=${f%/*}
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]\([^>"]*\)[>"].*/\1/p' "$src/$f" |
    while read -r h; do
        if [ -e "$src/$d/$h" ]; then continue            # its own folder
        elif [ -e "$src/$h" ]; then t=${h%/*}
        elif [ -e "$src/include/$h" ]; then t=include/${h%/*}
        else continue; fi                                # a system header
        [ "$t" = "$h" ] && continue                      # config.h: generated, no folder
        [ "$t" != "$d" ] && echo "$d $t $f $h"
    done
done < "$tmp/files" > "$tmp/edges"

# upward EDGES-FILE: print each edge that goes up the order (or names a
# folder the order does not place).
upward() {
    printf '%s\n' "$RANKS" | awk 'NR == FNR { r[$1] = $2; next }
        !($1 in r) || !($2 in r) || r[$2] > r[$1] {
            print $3 " includes " $4 ": " $1 " -> " $2 " goes up the order" }' - "$1"
}

echo "1..4"

# 1: the check can fail (planted: predict including compile's header).
echo "coordinator/predict coordinator/compile coordinator/predict/x.c coordinator/compile/co_lower.h" > "$tmp/planted"
upward "$tmp/planted" > "$tmp/why"
if [ "$(wc -l < "$tmp/why")" -eq 1 ]; then ok "the check finds a planted upward include"
else not_ok "the check finds a planted upward include"; fi

# 2: the edges were read (the tree has some, and compile uses planner).
: > "$tmp/why"
if [ -s "$tmp/files" ] && grep -q '^coordinator/compile planner ' "$tmp/edges"; then
    ok "$(wc -l < "$tmp/files" | tr -d ' ') files, $(wc -l < "$tmp/edges" | tr -d ' ') includes across folders read"
else echo "files: $(wc -l < "$tmp/files"), edges: $(wc -l < "$tmp/edges")" > "$tmp/why"
    not_ok "includes across folders read"; fi

# 3: every folder is placed and every include goes down the order.
printf '%s\n' "$RANKS" | awk 'NR == FNR { r[$1] = $2; next }
    !($1 in r) { print "folder " $1 " has no place in ORDER (tests/common/test_layers.sh)" }' \
    - "$tmp/folders" > "$tmp/why"
upward "$tmp/edges" | LC_ALL=C sort -u >> "$tmp/why"
if [ ! -s "$tmp/why" ]; then ok "every folder includes only its own and lower folders"
else not_ok "every folder includes only its own and lower folders"; fi

# 4: the folder graph itself has no loop, whatever the order says.
awk '{ print $1, $2 }' "$tmp/edges" | LC_ALL=C sort -u > "$tmp/pairs"
if tsort "$tmp/pairs" > /dev/null 2> "$tmp/why"; then ok "no circle between folders (tsort)"
else not_ok "no circle between folders (tsort)"; fi

[ "$fails" -eq 0 ]
