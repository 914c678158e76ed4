#!/bin/sh
# tests/common/test_function_size.sh — every library function at most 120
# lines (issue 35), TAP: tools/check-function-size on the library's
# folders must list none. Test 1 shows the tool can fail on a planted
# 121-line function (and passes one of 120).
src=${EIN_SRCDIR:-..}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
. "$src/tests/tap.sh" # ok, not_ok
TAP_WHY="$tmp/why"
echo "1..2"

# a function of body + 4 lines: its name, `{`, the body, `return`, `}`
plant() {
    { echo "int"; echo "$1(void)"; echo "{"; i=0
      while [ $i -lt "$2" ]; do echo "    (void)0;"; i=$((i + 1)); done
      echo "    return 0;"; echo "}"; } >> "$tmp/x.c"
}
: > "$tmp/x.c"
plant long_one 117     # 121 lines from its name to its `}`
plant short_one 116    # 120 lines
"$src/tools/check-function-size" "$tmp/x.c" > "$tmp/why" 2>&1
rc=$?
if [ $rc -eq 1 ] && [ "$(wc -l < "$tmp/why")" -eq 1 ] && grep -q '^121 .*long_one$' "$tmp/why"; then
    : > "$tmp/why"; ok "the check finds a planted 121-line function and passes a 120-line one"
else echo "exit $rc" >> "$tmp/why"; not_ok "the check finds a planted 121-line function"; fi

"$src/tools/check-function-size" > "$tmp/why" 2>&1
rc=$?
if [ $rc -eq 0 ] && [ ! -s "$tmp/why" ]; then ok "no library function over 120 lines"
else not_ok "no library function over 120 lines (tools/check-function-size: exit $rc)"; fi
[ "$fails" -eq 0 ]
