#!/bin/sh
# tests/exchange/test_machines.sh — the built-in machines come from
# topologies/*.topo (exchange/xp_machines.awk, TAP): the build's table is
# the generator's output, a new file is a new machine, and a statement the
# generator does not know stops it by name.
set -u
B=${EIN_BUILDDIR:-.}
SRC=${EIN_SRCDIR:-..}
AWK=${AWK:-awk}
G="$SRC/exchange/xp_machines.awk"
S=$(mktemp -d "${TMPDIR:-/tmp}/machines-test.XXXXXX") || exit 1
trap 'rm -rf "$S"' EXIT
. "$SRC/tests/tap.sh" # ok, not_ok (check is this test's own: NAME EXPR)
check() { if eval "$2"; then ok "$1"; else not_ok "$1" "$(head -c 600 "$S/err" 2>/dev/null)"; fi; }
gen() { LC_ALL=C $AWK -f "$G" "$@" > "$S/out" 2> "$S/err"; }

echo "1..9"
mkdir "$S/t" && cp "$SRC"/topologies/*.topo "$SRC"/topologies/*.cal "$S/t/" || exit 1

gen $(LC_ALL=C ls "$SRC"/topologies/*.topo)
check "the build's table is the generator's output for topologies/" \
    '[ $? -eq 0 ] && cmp -s "$S/out" "$B/exchange/xp_topo_builtin.c"'

gen $(LC_ALL=C ls "$S"/t/*.topo)
check "the same files give the same table" 'sed "s|$S/t|X|" "$S/out" | cmp -s - "$B/exchange/xp_topo_builtin.c"'

# A new machine is one file.
cat > "$S/t/zz-test.topo" <<'T'
name zz-test
gpus 4
hbm 1 TB/s
port 100 GB/s
rest direct
calibration zz
#@ detect ZZ9000
#@ pcie 31.5 GB/s PCIe Gen4 x16
#@ hosts 25 GB/s 12 us 4 x test NIC
#@ cal overhead 3 us
T
gen $(LC_ALL=C ls "$S"/t/*.topo)
check "a new .topo file is a new row" \
    'grep -q "{\"zz-test\", text_[0-9]*, detect_[0-9]*, \"PCIe Gen4 x16\", 31.5e9, 0, 0," "$S/out" &&
     grep -q "\"25 GB/s\", \"12 us\", \"4 x test NIC\"" "$S/out" &&
     grep -q "\"name zz\\\\n\"" "$S/out" && grep -q "\"overhead 3 us\\\\n\"" "$S/out" &&
     grep -q "\"zz-test\", NULL};" "$S/out"'

echo "#@ nics 8 x 400" >> "$S/t/zz-test.topo"
gen $(LC_ALL=C ls "$S"/t/*.topo)
check "an unknown #@ statement is refused by name" \
    '[ $? -ne 0 ] && grep -q "zz-test.topo:11: unknown built-in machine statement .nics." "$S/err"'

sed -i '$d' "$S/t/zz-test.topo"
echo "#@ pcie 31.5 GiB/s PCIe" >> "$S/t/zz-test.topo"
gen $(LC_ALL=C ls "$S"/t/*.topo)
check "a rate in an unknown unit is refused" '[ $? -ne 0 ] && grep -q "bad rate unit .GiB/s." "$S/err"'

sed -i '$d' "$S/t/zz-test.topo"
echo "#@ detect-fallback" >> "$S/t/zz-test.topo"
gen $(LC_ALL=C ls "$S"/t/*.topo)
check "two fallback machines are refused" '[ $? -ne 0 ] && grep -q "2 machines say" "$S/err"'

sed -i '$d' "$S/t/zz-test.topo"
sed -i 's/^name zz-test$/name zz-other/' "$S/t/zz-test.topo"
gen $(LC_ALL=C ls "$S"/t/*.topo)
check "a file named for another machine is refused" \
    '[ $? -ne 0 ] && grep -q "zz-test.topo names itself .zz-other." "$S/err"'

sed -i 's/^name zz-other$/name zz-test/; /^#@ pcie/d' "$S/t/zz-test.topo"
gen $(LC_ALL=C ls "$S"/t/*.topo)
check "a detected machine without its PCIe link is refused" \
    '[ $? -ne 0 ] && grep -q "zz-test is detected but has no" "$S/err"'

gen < /dev/null
check "no files: refused" '[ $? -ne 0 ] && grep -q "no topology files" "$S/err"'
