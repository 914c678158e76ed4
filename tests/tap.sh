# tests/tap.sh — the TAP helpers every shell test shares (sourced, not run;
# tests/e2e/lib.sh sources it too).
#
#   ok NAME              a passing test
#   not_ok NAME [LINE...]  a failing one, each LINE a "# " diagnostic; with
#                        no LINE, the file $TAP_WHY when it is set and not
#                        empty (its first ${TAP_WHY_LINES:-30} lines)
#   check NAME CMD...    ok when CMD succeeds, else not ok with the first
#                        20 lines of its stdout and stderr (kept in
#                        $tmp/out and $tmp/err: the test's own $tmp)
#
# $n counts the tests, $fails the failures: a script that prints no plan
# first ends with `[ "$fails" -eq 0 ]`.
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() {
    n=$((n + 1)); echo "not ok $n - $1"; fails=$((fails + 1)); shift
    if [ $# -gt 0 ]; then
        for l in "$@"; do echo "# $l"; done
    elif [ -n "${TAP_WHY:-}" ] && [ -s "$TAP_WHY" ]; then
        sed 's/^/# /' "$TAP_WHY" | head -"${TAP_WHY_LINES:-30}"
    fi
    return 0
}
check() {
    _name=$1
    shift
    if "$@" >"$tmp/out" 2>"$tmp/err"; then
        ok "$_name"
    else
        not_ok "$_name"
        sed 's/^/# /' "$tmp/out" "$tmp/err" | head -20
    fi
}
