#!/bin/sh
# tests/fuzz/test_fuzz_regress.sh — every input under tests/fuzz/regress/
# (the corpus kept from fuzzing, and every input that once crashed, hung or
# leaked) run once through its libFuzzer target, sanitizers on (TAP).
# Skipped when configure found no clang that links -fsanitize=fuzzer.
src=${EIN_SRCDIR:-..}
b=${EIN_BUILDDIR:-.}
if [ -z "${EIN_CC_FUZZ:-}" ]; then
    echo "1..0 # SKIP configure found no clang with -fsanitize=fuzzer"
    exit 0
fi
out=$(mktemp "${TMPDIR:-/tmp}/fuzz-regress.XXXXXX") || exit 1
trap 'rm -f "$out"' EXIT
CC_FUZZ=$EIN_CC_FUZZ FUZZ_OUT="$b/tests/fuzz/build" FUZZ_JOBS=${FUZZ_JOBS:-2} \
    sh "$src/tests/fuzz/build-and-run.sh" regress > "$out" 2>&1
rc=$?
if [ $rc -eq 77 ]; then
    echo "1..0 # SKIP $(head -n 1 "$out")"
    exit 0
fi
n=$(grep -c '^\(not \)\{0,1\}ok: ' "$out")
if [ "$n" -eq 0 ]; then
    echo "1..1"
    echo "not ok 1 - fuzz targets build and run the regression inputs"
    sed 's/^/# /' "$out" | tail -n 30
    exit 1
fi
echo "1..$n"
i=0
grep -v '^\(not \)\{0,1\}ok: ' "$out" | sed 's/^/# /'
grep '^\(not \)\{0,1\}ok: ' "$out" | while IFS= read -r line; do
    i=$((i + 1))
    case $line in
    ok:*) echo "ok $i - ${line#ok: }" ;;
    *) echo "not ok $i - ${line#not ok: }" ;;
    esac
done
exit $rc
