#!/bin/sh
# tests/common/test_file_circles.sh — no file-to-file circle inside a
# folder (issue 35), TAP.
#
# What it counts. In each source folder of the library (and tools/,
# examples/), a "file" is a stem: a.c, a.cu, a.h and a.cuh are one node "a".
# An edge a -> b (a and b in the same folder, a != b) is either
#   - an include: a.c/.cu/.h/.cuh/.def includes b.h (or b.cuh), found in the
#     folder as the compiler finds it, and b.c or b.cu exists (a header with
#     no body of its own, such as an internal x_int.h shared by split files
#     or a .def table, is vocabulary, not a file one can call back into: it
#     is no target, though its own includes are edges); or
#   - a call: a.c or a.cu names a function that b.c or b.cu defines without
#     `static` (the project's style: the name at the start of a line with its
#     parameters, the body's `{` alone at the start of a line), comments and
#     string literals left out; so split files that call each other through a
#     shared header count, as a.c includes b.h and b.c includes a.h would.
# A circle is a loop in one folder's graph (tsort finds them); the test
# wants none. Not seen: a call written inside a macro of a header (the
# macro's body is read where it is defined, not where it is used) and calls
# through function pointers (a table of operations is the way to call up). Test 1 shows the check can fail on a planted pair.
src=${EIN_SRCDIR:-..}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
. "$src/tests/tap.sh" # ok, not_ok
TAP_WHY="$tmp/why"
TAP_WHY_LINES=200
ROOTS='include common kernels worker planner exchange coordinator node tools examples'

# edges DIR: print "A B WHY" for every edge between two files of DIR.
edges() {
    d=$1
    # includes of the folder's own files
    for f in "$d"/*.c "$d"/*.h "$d"/*.cu "$d"/*.cuh "$d"/*.def; do
        [ -f "$f" ] || continue
        a=${f##*/}; a=${a%.*}
        sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]\([^>"]*\)[>"].*/\1/p' "$f" |
        while read -r h; do
            if [ -e "$d/$h" ]; then t=$d/$h          # as the compiler finds it
            elif [ -e "$h" ]; then t=$h              # -I$(top_srcdir)
            elif [ -e "include/$h" ]; then t=include/$h
            else continue; fi
            [ "${t%/*}" = "$d" ] || continue         # another folder's file
            b=${t##*/}; b=${b%.*}
            [ -e "$d/$b.c" ] || [ -e "$d/$b.cu" ] || continue  # a header with no body
            [ "$a" != "$b" ] && echo "$a $b ${f##*/} includes $h"
        done
    done
    # calls to functions another file of the folder defines
    set -- "$d"/*.c "$d"/*.cu
    cs=
    for f in "$@"; do [ -f "$f" ] && cs="$cs $f"; done
    [ -n "$cs" ] || return 0
    # shellcheck disable=SC2086
    awk '
    function stem(p,  s) { s = p; sub(/.*\//, "", s); sub(/\.[^.]*$/, "", s); return s }
    FNR == 1 { incom = 0; sig = ""; file = FILENAME; st = stem(FILENAME) }
    {
        # drop comments and string literals
        line = $0; out = ""
        while (line != "") {
            if (incom) {
                i = index(line, "*/")
                if (!i) { line = ""; break }
                line = substr(line, i + 2); incom = 0; continue
            }
            if (match(line, /\/\*|\/\/|"|\047/)) {
                out = out substr(line, 1, RSTART - 1)
                tok = substr(line, RSTART, RLENGTH); line = substr(line, RSTART + RLENGTH)
                if (tok == "/*") incom = 1
                else if (tok == "//") line = ""
                else {  # a literal: skip to its unescaped end
                    while (line != "" && substr(line, 1, 1) != tok) {
                        if (substr(line, 1, 1) == "\\") line = substr(line, 2)
                        line = substr(line, 2)
                    }
                    line = substr(line, 2); out = out " "
                }
            } else { out = out line; line = "" }
        }
        if (pass == 1) {
            # a leading __attribute__((...)) is no name (what follows is)
            while (out ~ /^__attribute__[ \t]*\(\(/) {
                d = 0
                for (i = 1; i <= length(out); i++) {
                    ch = substr(out, i, 1)
                    if (ch == "(") d++
                    else if (ch == ")" && --d == 0) break
                }
                out = substr(out, i + 1); sub(/^[ \t]+/, "", out)
            }
            if (out ~ /^[A-Za-z_][A-Za-z0-9_ \t\*]*[A-Za-z_][A-Za-z0-9_]*[ \t]*\(/ && out !~ /(^|[^A-Za-z0-9_])static[ \t]/ \
                && out !~ /^(extern|typedef)[ \t]/) {
                s = out; sub(/[ \t]*\(.*/, "", s); k = split(s, w, /[ \t\*]+/); sig = w[k]
                if (sig == "__attribute__") sig = ""
            }
            if (out ~ /^[;}]/ || out ~ /;[ \t]*$/) sig = ""
            if (out ~ /^\{/ && sig != "") { if (!(sig in def)) def[sig] = st; sig = "" }
            next
        }
        k = split(out, w, /[^A-Za-z0-9_]+/)
        for (i = 1; i <= k; i++)
            if ((w[i] in def) && def[w[i]] != st && !((st, w[i]) in seen)) {
                seen[st, w[i]] = 1
                print st, def[w[i]], stem(file) " calls " w[i]
            }
    }' pass=1 $cs pass=2 $cs
}

# loops EDGES: print the circles tsort finds in one folder's edges, one
# line each (its files).
loops() {
    awk '{ print $1, $2 }' "$1" | LC_ALL=C sort -u > "$tmp/pairs"
    tsort "$tmp/pairs" 2>&1 >/dev/null | awk '
        /input contains a loop/ { if (l != "") print l; l = ""; next }
        /^tsort: / { sub(/^tsort: /, ""); l = (l == "" ? $0 : l " " $0) }
        END { if (l != "") print l }'
}

echo "1..3"

# 1: the check can fail: a planted folder whose two files call each other.
mkdir -p "$tmp/planted"
printf 'int\nx_a(void)\n{\n    return x_b();\n}\n' > "$tmp/planted/x_a.c"
printf '/* x_a( in a comment is no call */\nint\nx_b(void)\n{\n    return x_a();\n}\n' > "$tmp/planted/x_b.c"
printf 'static int\nx_c(void)\n{\n    return x_a() + 0 * sizeof "x_b(";\n}\n' > "$tmp/planted/x_c.c"
edges "$tmp/planted" > "$tmp/planted.edges"
loops "$tmp/planted.edges" > "$tmp/why"
if [ "$(tr ' ' '\n' < "$tmp/why" | LC_ALL=C sort | tr '\n' ' ')" = "x_a x_b " ] &&
   [ "$(wc -l < "$tmp/planted.edges")" -eq 3 ]; then
    : > "$tmp/why"; ok "the check finds a planted circle (x_a <-> x_b, not x_c)"
else cat "$tmp/planted.edges" >> "$tmp/why"; not_ok "the check finds a planted circle"; fi

# 2 and 3: every folder of the tree.
folders=$(for r in $ROOTS; do [ -d "$src/$r" ] && (cd "$src" && find "$r" -name node_modules -prune -o -type d -print); done | LC_ALL=C sort)
: > "$tmp/all"
: > "$tmp/circles"
for d in $folders; do
    (cd "$src" && edges "$d") > "$tmp/e"
    sed "s|^|$d |" "$tmp/e" >> "$tmp/all"
    loops "$tmp/e" > "$tmp/l"
    while read -r l; do
        echo "circle in $d: $l" >> "$tmp/circles"
        # shellcheck disable=SC2086
        printf '%s\n' $l | awk 'NR == FNR { c[$1] = 1; next } ($1 in c) && ($2 in c) { print "  " $0 }' - "$tmp/e" >> "$tmp/circles"
    done < "$tmp/l"
done
calls=$(grep -c ' calls ' "$tmp/all")
incs=$(grep -c ' includes ' "$tmp/all")
: > "$tmp/why"
if [ "$calls" -gt 50 ] && [ "$incs" -gt 50 ]; then
    ok "$incs includes and $calls calls between files of one folder read"
else echo "includes $incs, calls $calls" > "$tmp/why"; not_ok "edges read"; fi
cp "$tmp/circles" "$tmp/why"
if [ ! -s "$tmp/why" ]; then ok "no file-to-file circle inside a folder"
else not_ok "no file-to-file circle inside a folder ($(grep -c '^circle' "$tmp/why") found)"; fi

[ "$fails" -eq 0 ]
