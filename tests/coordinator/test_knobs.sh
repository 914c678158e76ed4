#!/bin/sh
# tests/coordinator/test_knobs.sh — the knob table (common/base/ein_knobs.def,
# TAP): `einrun --help-env` lists every environment variable, the docs hold
# the same table, and no C code reads the environment but through
# ein_knob_get (the table's getter).
set -u
B=${EIN_BUILDDIR:-.}
SRC=${EIN_SRCDIR:-..}
S=$(mktemp -d "${TMPDIR:-/tmp}/knobs-test.XXXXXX") || exit 1
trap 'rm -rf "$S"' EXIT
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }
check() { if eval "$2"; then ok "$1"; else not_ok "$1" "$(head -c 600 "$S/why" 2>/dev/null)"; fi; }

echo "1..7"
"$B/einrun" --help-env > "$S/env" 2> "$S/why"
check "einrun --help-env exits 0 and prints a table" \
    '[ $? -eq 0 ] && head -n 1 "$S/env" | grep -q "^| variable | when unset | read by | meaning |$"'

# Every row of the .def file is a line of the table, and no more.
sed -n 's/^EIN_KNOB([A-Z_0-9]*, "\([A-Za-z_0-9]*\)".*/\1/p' "$SRC/common/base/ein_knobs.def" | sort > "$S/def"
sed -n 's/^| `\([A-Za-z_0-9]*\)` |.*/\1/p' "$S/env" | sort > "$S/listed"
diff "$S/def" "$S/listed" > "$S/why"
check "--help-env lists every knob of common/base/ein_knobs.def ($(wc -l < "$S/def"))" \
    '[ $? -eq 0 ] && [ -s "$S/def" ]'

# No getenv outside the getter: C, C headers and CUDA, tests aside (their
# harness variables are theirs).
(cd "$SRC" && grep -rn --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' \
    -E '(^|[^_[:alnum:]])(secure_)?getenv[[:space:]]*\(' \
    common planner exchange kernels coordinator worker node tools include examples) \
    | grep -v '^common/base/ein_knob\.c:' > "$S/why"
check "no getenv call outside common/base/ein_knob.c" '[ ! -s "$S/why" ]'

# Every knob the C code names is a row (the compiler checks the ids; this
# checks that each row is read somewhere, in C or in the Python package).
: > "$S/why"
for k in $(sed -n 's/^EIN_KNOB(\([A-Z_0-9]*\), "\([A-Za-z_0-9]*\)".*/\1:\2/p' "$SRC/common/base/ein_knobs.def"); do
    id=${k%%:*} name=${k#*:}
    if ! (cd "$SRC" && grep -rqs --include='*.c' --include='*.cu' "EIN_KNOB_$id\\b" \
            common planner exchange kernels coordinator worker node tools) &&
       ! grep -qs "environ.get(\"$name\"" "$SRC"/python/einsummable/*.py &&
       ! (cd "$SRC" && grep -rqs "\$$name\\b\\|\${$name" tests/*/*.sh tests/*.am tools/*.sh); then
        echo "$name is in the table but nothing reads it" >> "$S/why"
    fi
done
check "every row is read somewhere" '[ ! -s "$S/why" ]'

# The Python package's environment variables are rows too.
grep -ho 'environ.get("[A-Za-z_0-9]*"' "$SRC"/python/einsummable/*.py |
    sed 's/.*"\(.*\)"/\1/' | sort -u > "$S/py"
comm -23 "$S/py" "$S/def" > "$S/why"
check "every variable the Python package reads is in the table ($(wc -l < "$S/py"))" \
    '[ ! -s "$S/why" ] && [ -s "$S/py" ]'

# docs/environment.md holds the table as einrun prints it.
sed -n '/^| variable | when unset/,/^$/p' "$SRC/docs/environment.md" | sed '/^$/d' > "$S/doc"
diff "$S/env" "$S/doc" > "$S/why"
check "docs/environment.md is einrun --help-env's table" '[ $? -eq 0 ]'

"$B/einrun" --help > "$S/help" 2>&1
check "einrun --help names --help-env" 'grep -q -- "--help-env" "$S/help"'
