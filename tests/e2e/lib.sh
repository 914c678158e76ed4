# tests/e2e/lib.sh — shared by the shell end-to-end tests (sourced, not run).
# Expects $S (the test's scratch directory, also its TMPDIR) to be set.

n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }

# leftovers PID: what a run of einrun PID left behind: worker processes of
# this scratch directory, its shared memory, run directories, temporary
# output files and kept old outputs. Prints nothing when clean.
leftovers() {
    l=""
    for p in /proc/[0-9]*; do
        c=$( (tr '\0' ' ' < "$p/cmdline") 2>/dev/null) || continue
        case "$c" in *einworker*"$S"*) l="$l process ${p#/proc/};" ;; esac
    done
    for f in /dev/shm/ein-"$1"-*; do [ -e "$f" ] && l="$l $f;"; done
    for f in "$S"/einrun.* "$S"/*.einrun-tmp-* "$S"/*.einrun-old-*; do
        { [ -e "$f" ] || [ -L "$f" ]; } && l="$l $f;"
    done
    echo "$l"
}

# The FFN of the paper's §2 at small odd sizes.
write_ffn() {
    cat > "$1" <<'EIN'
dims tokens=37 d_model=24 d_ff=50
input x[tokens, d_model]
input w1[d_model, d_ff]
input w2[d_ff, d_model]
act    = matmul(x, w1)
hidden = relu(act)
y      = matmul(hidden, w2)
save y
EIN
}

# Lines of a run's output, leaving out the sanitizers' own warnings (an ASan
# build may print one about stack bounds after a fork; it is not einrun's)
# and the line that names the inputs a demo run generates (no --input).
out_lines() {
    grep -v -e '^==[0-9]*==WARNING: ASan' -e '^False positive error reports may follow' \
        -e '^For details see https://github.com/google/sanitizers' \
        -e '^einrun: generating .* from --seed [0-9]* (no input given)$' "$1" | grep -c .
}
