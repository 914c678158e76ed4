#!/bin/sh
# tests/fuzz/build-and-run.sh — build the libFuzzer targets with clang and
# run them.
#
#   build-and-run.sh build            build the targets only
#   build-and-run.sh run [SECONDS]    fuzz every target SECONDS (default 30)
#                                     from its seeds and regression inputs
#   build-and-run.sh regress          run every file of regress/<target>/ once
#
# Targets (tests/fuzz/fuzz_*.c): ein (the .ein parser, then the planner),
# exprog (ExProg parse, print + parse back, validate, simulate), wire
# (msgpack messages), npy (.npy headers and box reads), rules (rewrite
# rules), probe (GPU probe text, topology detection), topo (topology files),
# safetensors (.safetensors headers, raw box reads by mmap), tokenizer (a
# tokenizer.json, encode, decode and streaming; fuzz_tokenizer.c), saved (the
# graph, plan and programs of a saved program file), load (the whole
# saved-program loader: a file without its digest, which the target adds).
# FUZZ_TARGETS="exprog topo" picks some.
#
# The library sources are compiled directly with clang
# (-fsanitize=fuzzer-no-link,address,undefined) into FUZZ_OUT (default
# ./fuzz-build); CC_FUZZ names clang (default: clang). A run fails (exit 1)
# on any crash, sanitizer report, leak, input over 2 s or allocation over
# 2 GB; the input is kept in FUZZ_OUT/artifacts/<target>/ (copy it into
# regress/<target>/ once fixed, and it is a regression test from then on).
# Exit 77 when clang cannot build a fuzzer (the TAP wrapper then skips).
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
mode=${1:-run}
secs=${2:-30}
cc=${CC_FUZZ:-clang}
out=${FUZZ_OUT:-$PWD/fuzz-build}
jobs=${FUZZ_JOBS:-2}
targets=${FUZZ_TARGETS:-ein exprog wire npy rules probe topo safetensors saved load tokenizer}
limits="-timeout=2 -rss_limit_mb=2048 -malloc_limit_mb=2048 -max_len=4096"
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"

mkdir -p "$out/obj" || exit 1
# Can clang build a fuzzer here?
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return (int)(n && d[0] == 0xff) * 0; }\n' \
    > "$out/probe.c"
if ! "$cc" -fsanitize=fuzzer,address,undefined "$out/probe.c" -o "$out/probe" >/dev/null 2>&1; then
    echo "fuzz: $cc cannot build with -fsanitize=fuzzer (Debian: apt-get install clang libclang-rt-14-dev)"
    exit 77
fi

pc() { pkg-config "$@" 2>/dev/null; }
deps_cflags="$(pc --cflags libsodium) $(pc --cflags libzmq) $(pc --cflags msgpack-c || pc --cflags msgpack) $(pc --cflags openblas) $(pc --cflags jansson) $(pc --cflags libpcre2-8) $(pc --cflags libutf8proc)"
deps_libs="$(pc --libs libsodium) $(pc --libs libzmq) $(pc --libs msgpack-c || pc --libs msgpack) $(pc --libs openblas) $(pc --libs jansson) $(pc --libs libpcre2-8) $(pc --libs libutf8proc) -lpthread -lm"
cflags="-std=gnu11 -g -O1 -I$src $deps_cflags -DPL_REWRITE_RULES_DIR=\"$src/planner/rewrite/rules\" \
 -DPL_REWRITE_RULES_SRCDIR=\"$src/planner/rewrite/rules\""
lib_srcs=$(cd "$src" && ls common/*/*.c planner/*.c planner/ops/*.c exchange/*.c \
    planner/rewrite/pl_rewrite.c planner/rewrite/rw_egraph.c planner/rewrite/rw_rules.c \
    planner/rewrite/rw_saturate.c \
    planner/rewrite/rw_ilp.c planner/rewrite/pl_rewrite_weights.c coordinator/compile/*.c \
    $(ls coordinator/predict/*.c | grep -v co_calib_run.c) | grep -v '^exchange/xp_topo_builtin\.c$')

# Rebuild everything when any source or header is newer than the last build
# (not the build's exchange/xp_topo_builtin.c: made here from the .awk and
# .topo files, which count; a build regenerates it after make distclean).
stamp="$out/obj/.stamp"
if [ ! -f "$stamp" ] || [ -n "$( (find "$src/common" "$src/planner" "$src/exchange" \
        "$src/coordinator" "$src/topologies" -newer "$stamp" \( -name '*.c' -o -name '*.h' \
        -o -name '*.def' -o -name '*.awk' -o -name '*.topo' -o -name '*.cal' \) \
        ! -path "$src/exchange/xp_topo_builtin.c";
        find "$here" -maxdepth 1 -newer "$stamp" \( -name '*.c' -o -name '*.h' \)) | head -n 1)" ]; then
    echo "fuzz: compiling $(echo $lib_srcs | wc -w) library sources with $cc"
    rm -f "$out"/obj/*.o
    touch "$stamp.new"
    for f in $lib_srcs; do echo "$f"; done | xargs -P "$jobs" -I{} sh -c \
        'o="$1/obj/$(echo "$2" | tr / _ | sed "s/\.c$/.o/")"; $3 $4 -fsanitize=fuzzer-no-link -c "$5/$2" -o "$o" || exit 255' \
        sh "$out" {} "$cc" "$cflags $san" "$src" || { echo "fuzz: compile failed"; exit 1; }
    # The built-in machines are generated from topologies/ (exchange/local.am).
    LC_ALL=C awk -f "$src/exchange/xp_machines.awk" $(LC_ALL=C ls "$src"/topologies/*.topo) \
        > "$out/xp_topo_builtin.c" &&
        $cc $cflags $san -fsanitize=fuzzer-no-link -c "$out/xp_topo_builtin.c" \
            -o "$out/obj/exchange_xp_topo_builtin.o" || { echo "fuzz: compile failed"; exit 1; }
    for t in ein exprog wire npy rules probe topo safetensors saved load tokenizer; do
        $cc $cflags $san -fsanitize=fuzzer "$here/fuzz_$t.c" "$out"/obj/*.o $deps_libs \
            -o "$out/fuzz_$t" || { echo "fuzz: link of fuzz_$t failed"; exit 1; }
    done
    $cc $cflags $san "$here/fuzz_seeds.c" "$out"/obj/*.o $deps_libs -o "$out/fuzz_seeds" \
        || { echo "fuzz: link of fuzz_seeds failed"; exit 1; }
    mv "$stamp.new" "$stamp"
fi
[ "$mode" = build ] && exit 0

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

if [ "$mode" = regress ]; then
    status=0
    for t in $targets; do
        files=$(find "$here/regress/$t" -type f 2>/dev/null | sort)
        [ -n "$files" ] || continue
        n=$(echo "$files" | wc -l)
        # shellcheck disable=SC2086
        if echo "$files" | xargs "$out/fuzz_$t" $limits -runs=1 >"$out/regress-$t.log" 2>&1; then
            echo "ok: $t: $n inputs"
        else
            echo "not ok: $t: a regression input fails (log: $out/regress-$t.log)"
            grep -E 'ERROR|SUMMARY|Running:|invariant' "$out/regress-$t.log" | tail -n 8
            status=1
        fi
    done
    exit $status
fi

# run: seeds from the project's own files, then regress/<target>/.
seeds="$out/seeds"
rm -rf "$seeds" && mkdir -p "$seeds" || exit 1
"$out/fuzz_seeds" "$seeds" || exit 1
mkdir -p "$seeds/ein" "$seeds/exprog" "$seeds/rules" "$seeds/probe" "$seeds/topo" "$seeds/saved" \
    "$seeds/load"
cp "$src"/examples/*.ein "$seeds/ein/"
cp "$src"/tests/exchange/programs/*.xp "$seeds/exprog/"
# One rule a seed: every rule is shape-checked over many shapes, so whole
# rule files run at a few execs/s.
awk -v d="$seeds/rules" '/^\(rule/ { n++; print > (d "/rule-" n) }' \
    "$src"/planner/rewrite/rules/*.rules
cp "$src"/topologies/*.topo "$seeds/topo/"
printf 'einprobe 1\ngpu 0 NVIDIA H200\ngpu 1 NVIDIA H200\npeer 0 1 1 0\npeer 1 0 1 0\n' \
    > "$seeds/probe/h200x2"
printf 'einprobe 1\ngpu 0 Tesla V100-SXM2-32GB\ngpu 1 NVIDIA A100-PCIe\npeer 0 1 0 0\npeer 1 0 1 1\n' \
    > "$seeds/probe/mixed"
status=0
for t in $targets; do
    corpus="$out/corpus/$t"
    mkdir -p "$corpus" "$out/artifacts/$t"
    cp "$seeds/$t"/* "$corpus/" 2>/dev/null
    [ -d "$here/regress/$t" ] && cp "$here/regress/$t"/* "$corpus/" 2>/dev/null
    echo "$t"
done | xargs -P "$jobs" -I{} sh -c \
    '"$1/fuzz_$2" $3 -max_total_time=$4 -print_final_stats=1 -artifact_prefix="$1/artifacts/$2/" \
        "$1/corpus/$2" >"$1/run-$2.log" 2>&1; rc=$?
     execs=$(sed -n "s/^stat::number_of_executed_units: *//p" "$1/run-$2.log")
     speed=$(sed -n "s/^stat::average_exec_per_sec: *//p" "$1/run-$2.log")
     if [ $rc -eq 0 ]; then echo "ok: $2: $4 s, $execs runs, $speed exec/s";
     else echo "FINDING: $2 (exit $rc), input in $1/artifacts/$2/, log $1/run-$2.log";
          grep -E "ERROR|SUMMARY|invariant" "$1/run-$2.log" | head -n 5; exit 1; fi' \
    sh "$out" {} "$limits" "$secs" || status=1
exit $status
