#!/bin/sh
# tests/e2e/test_outputs.sh — output files and the files einrun is given:
# temporaries never follow a planted link, only regular files are replaced,
# outputs appear all together or not at all, nothing is left behind by a
# signal or by a killed run once another has run, and FIFOs, devices and
# oversized files are refused instead of hanging or growing (TAP).
set -u
B=${EIN_BUILDDIR:-.}
EINRUN="$(cd "$B" && pwd)/einrun"
NPY="$(cd "$B" && pwd)/tests/e2e/npytool"
EINGEN="$(cd "$B" && pwd)/eingen"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/e2e/lib.sh"
scratch out

write_ffn ffn.ein
# The same FFN saving all three results, in this order.
sed 's/^save y$/save act\nsave hidden\nsave y/' ffn.ein > ffn3.ein
"$NPY" write x_ok.npy f32 1 37 24 || exit 1
printf 'victim\n' > victim
mkfifo fifo
printf '#!/bin/sh\nexec sleep 30\n' > hang.sh
# Worker wrappers: put a directory where y.npy goes once the run has
# started; swap the temporary of y.npy for a link to the victim.
printf '#!/bin/sh\nmkdir -p "%s/y.npy"\nexec "$@"\n' "$S" > block-y.sh
printf '#!/bin/sh\nfor f in "%s"/y.npy.einrun-tmp-*; do [ -f "$f" ] && rm -f "$f" && ln -s "%s/victim" "$f"; done\nexec "$@"\n' \
    "$S" "$S" > swap-tmp.sh
chmod +x hang.sh block-y.sh swap-tmp.sh

# run STATUS PATTERN einrun-args...: einrun, killed after 20 s (a hang
# fails); sets $pid and $r, "" when the status and message are as expected.
run() {
    want=$1; pat=$2; shift 2
    "$EINRUN" "$@" > out.txt 2>&1 &
    pid=$!
    ( sleep 20; kill -KILL $pid ) > /dev/null 2>&1 &
    dog=$!
    wait $pid
    rc=$?
    kill $dog 2> /dev/null
    r=""
    if [ "$rc" -ne "$want" ]; then
        r="exit status $rc, expected $want: $(cat out.txt)"
    elif ! grep -q -- "$pat" out.txt; then
        r="message does not match '$pat': $(cat out.txt)"
    elif [ "$want" -ne 0 ] && [ "$(out_lines out.txt)" -gt 1 ]; then
        r="error is not one line: $(cat out.txt)"
    fi
}
# check NAME PROBLEM...: ok when every PROBLEM is empty.
check() {
    name=$1; shift
    for p in "$@"; do
        if [ -n "$p" ]; then not_ok "$name" "$p"; return; fi
    done
    ok "$name"
}
victim_ok() { [ "$(cat victim)" = victim ] || echo "victim was overwritten"; }
left() { l=$(leftovers "$1"); [ -z "$l" ] || echo "left behind:$l"; }

echo "1..24"

# A link planted at the name the temporary had before (OUT.einrun-tmp-PID):
# the run succeeds and the file the link points to is untouched.
sh -c 'd=$1; shift; ln -s "$d/victim" "$d/y.npy.einrun-tmp-$$"; exec "$@"' sh "$S" \
    "$EINRUN" --cpu 2 ffn.ein > out.txt 2>&1
rc=$?
p=""; [ "$rc" -eq 0 ] || p="exit status $rc: $(cat out.txt)"
check "link planted at the temporary's old name is not followed" "$p" "$(victim_ok)" \
    "$([ -f y.npy ] && [ ! -L y.npy ] || echo 'y.npy is not a regular file')"
rm -f y.npy y.npy.einrun-tmp-*

# The temporary swapped for a link while the workers start: the workers do
# not write through it and the run fails; nothing appears.
run 1 "y.npy.einrun-tmp-" --cpu 2 --worker-wrapper 0:./swap-tmp.sh ffn.ein
check "temporary replaced by a link: not written through" "$r" "$(victim_ok)" \
    "$([ ! -e y.npy ] || echo 'y.npy appeared')" "$(left $pid)"
rm -rf y.npy*

ln -s victim y.npy
run 2 "y.npy: it exists and is a symbolic link" --cpu 2 ffn.ein
check "output is a link to a file elsewhere: refused" "$r" "$(victim_ok)" \
    "$([ -L y.npy ] || echo 'the link was replaced')" "$(left $pid)"
rm -f y.npy

run 2 "/dev/full: it exists and is a character device" --cpu 2 --output y=/dev/full ffn.ein
check "/dev/full as --output: refused" "$r" "$([ -c /dev/full ] || echo '/dev/full is gone')" \
    "$(ls /dev/full.einrun-* 2>/dev/null)"

run 2 "fifo: it exists and is a FIFO" --cpu 2 --output y=fifo ffn.ein
check "FIFO as --output: refused, no hang" "$r" "$([ -p fifo ] || echo 'fifo was replaced')" \
    "$(left $pid)"

mkdir -p d
run 2 "are the same file" --cpu 2 --output act=a.npy --output y=d/../a.npy ffn3.ein
check "duplicate outputs, two spellings: refused" "$r" "$([ ! -e a.npy ] || echo 'a.npy appeared')" \
    "$(left $pid)"
run 2 "are the same file" --cpu 2 --output act=a.npy --output y="$S/a.npy" ffn3.ein
check "duplicate outputs, relative and absolute: refused" "$r" "$(left $pid)"
run 2 "are the same file" --cpu 2 --output act=y.npy ffn3.ein
check "--output onto another output's default name: refused" "$r" "$(left $pid)"
run 2 "--output y: given twice (a.npy and b.npy)" --cpu 2 --output y=a.npy --output y=b.npy ffn.ein
check "the same output given twice: refused" "$r" "$(left $pid)"
printf 'old\n' > h1.npy
ln h1.npy h2.npy
run 2 "are the same file" --cpu 2 --output act=h1.npy --output y=h2.npy ffn3.ein
check "duplicate outputs, hard links: refused" "$r" "$(left $pid)" \
    "$([ "$(cat h2.npy)" = old ] || echo 'h2.npy changed')"
rm -f h1.npy h2.npy

# All or nothing: act.npy is new, hidden.npy exists, y.npy cannot be
# published (a directory appears there during the run). Neither act.npy
# nor a new hidden.npy may stay.
printf 'old hidden\n' > hidden.npy
run 1 "no output was written" --cpu 2 --worker-wrapper ./block-y.sh ffn3.ein
check "third output cannot be published: none appears" "$r" \
    "$([ ! -e act.npy ] || echo 'act.npy appeared')" \
    "$([ "$(cat hidden.npy)" = "old hidden" ] || echo 'hidden.npy was not restored')" \
    "$([ -z "$(ls y.npy)" ] || echo "y.npy/ holds $(ls y.npy)")" "$(left $pid)"
rm -rf y.npy
run 0 "saved hidden" --cpu 2 ffn3.ein
check "then all three appear" "$r" "$("$NPY" info act.npy >/dev/null 2>&1 || echo 'no act.npy')" \
    "$("$NPY" info hidden.npy > /dev/null 2>&1 || echo 'hidden.npy not replaced')" "$(left $pid)"
rm -f act.npy hidden.npy y.npy

# SIGTERM while planning (32 LLaMA blocks take a while to plan): no
# temporary, no run directory. The temporaries used to be created before
# the exchanges were synthesised, and were left behind. They are created
# once planning is over, just before the workers start (before the run
# directory), so either one showing means planning is over; a SIGTERM
# that lands in between must leave nothing either.
"$EINGEN" llama --seqs 2 --tokens 64 --blocks 32 --dtype f32 > big.ein || exit 1
"$EINRUN" --cpu 8 big.ein > out.txt 2>&1 &
pid=$!
sleep 0.2
if [ -n "$(ls -d einrun.$pid.* *.einrun-tmp-* 2>/dev/null)" ] || ! kill -0 $pid 2>/dev/null; then
    kill -TERM $pid 2>/dev/null
    wait $pid
    l=$(left $pid)
    if [ -n "$l" ]; then check "SIGTERM just after planning leaves nothing" "$l"
    else ok "SIGTERM during planning leaves nothing # SKIP planning took less than 0.2 s"; fi
else
    kill -TERM $pid
    wait $pid
    check "SIGTERM during planning leaves nothing" "$(left $pid)"
fi

# kill -9 of einrun, its guard and its workers together (as a cgroup kill
# does): the next einrun removes what they left. (Its shared memory is not
# required to be there in between: an einrun of another test running at
# the same time may already have removed it.)
"$EINRUN" --cpu 2 --worker-timeout 60 --worker ./hang.sh ffn.ein > out.txt 2>&1 &
pid=$!
for i in $(seq 100); do
    [ -n "$(ls /dev/shm/ein-$pid-* 2>/dev/null)" ] && break
    sleep 0.1
done
kids=$(grep -l "^PPid:[[:space:]]*$pid\$" /proc/[0-9]*/status 2>/dev/null | cut -d/ -f3)
kill -9 $pid $kids
wait $pid 2>/dev/null
sleep 0.3
stale=$(left $pid)
check "kill -9 of einrun and its guard leaves files" \
    "$([ -n "$stale" ] || echo 'nothing was left: the test cannot tell')" \
    "$(case "$stale" in *einrun-tmp-*) ;; *) echo "no temporary in:$stale" ;; esac)" \
    "$(case "$stale" in *"$S/einrun.$pid."*) ;; *) echo "no run directory in:$stale" ;; esac)"
run 0 "saved y" --cpu 2 ffn.ein
check "the next einrun removes them" "$r" "$(left $pid)"
rm -f y.npy

# SIGTERM as soon as the temporaries exist, before the workers start, with
# an OpenBLAS thread pool in einrun (loaded through CBC's LAPACK; OpenBLAS
# ends it at the first fork): the signal must reach einrun's main thread,
# which turns it into a failed run (exit 1) and removes its files, never
# kill einrun from a library's thread (exit 143, temporaries left). Two
# LLaMA blocks: the pool is there whatever the program, and the whole plan
# must be made before the temporaries appear (32 blocks took minutes of CI
# under the sanitizers for nothing more).
"$EINGEN" llama --seqs 2 --tokens 64 --blocks 2 --dtype f32 > two.ein || exit 1
OPENBLAS_NUM_THREADS=2 "$EINRUN" --cpu 8 two.ein > out.txt 2>&1 &
pid=$!
# Wait for the temporaries up to 10 minutes (a busy machine, the
# sanitizers; a signal sent during planning would test something else).
end=$(($(date +%s) + 600))
while [ "$(date +%s)" -lt "$end" ]; do
    [ -n "$(ls *.einrun-tmp-* 2>/dev/null)" ] || ! kill -0 $pid 2>/dev/null && break
    sleep 0.01
done
kill -TERM $pid
wait $pid
rc=$?
check "SIGTERM with library threads: einrun's own exit, nothing left" \
    "$([ $rc = 1 ] || echo "exit $rc, not 1: $(cat out.txt)")" "$(left $pid)"

# SIGHUP (the terminal went away) while the workers start: the same as
# SIGTERM, a failed run (exit 1) that leaves nothing; it used to kill
# einrun outright (exit 129).
"$EINRUN" --cpu 2 --worker-timeout 60 --worker ./hang.sh ffn.ein > out.txt 2>&1 &
pid=$!
for i in $(seq 100); do
    [ -n "$(ls /dev/shm/ein-$pid-* 2>/dev/null)" ] && break
    sleep 0.1
done
kill -HUP $pid
wait $pid
rc=$?
check "SIGHUP ends the run like SIGTERM, nothing left" \
    "$([ $rc = 1 ] || echo "exit $rc, not 1: $(cat out.txt)")" \
    "$(grep -q 'interrupted by signal 1' out.txt || echo "no 'interrupted': $(cat out.txt)")" \
    "$(sleep 0.3; left $pid)"

# Inputs: FIFOs and devices are refused, never waited on.
run 2 "fifo: a FIFO, not a regular file" --cpu 2 fifo
check "FIFO as the plan file" "$r"
run 2 "fifo: a FIFO, not a regular file" --cpu 2 --input x=fifo ffn.ein
check "FIFO as --input" "$r"
run 2 "fifo: a FIFO, not a regular file" --cpu 2 --topology ./fifo ffn.ein
check "FIFO as --topology" "$r"
run 2 "fifo: a FIFO, not a regular file" --gpus 0-1 --gpu-probe fifo --show-topology
check "FIFO as --gpu-probe" "$r"
run 2 "/dev/zero: a character device, not a regular file" --cpu 2 --topology /dev/zero ffn.ein
check "--topology /dev/zero: refused, does not grow" "$r"
truncate -s 5M big.topo
run 2 "big.topo: 5242880 bytes, over the limit of 4 MiB for a topology file" \
    --cpu 2 --topology ./big.topo ffn.ein
check "--topology over the cap" "$r"
run 2 "d: a directory, not a regular file" --cpu 2 d
check "directory as the plan file" "$r"

[ "$n" -eq 22 ] || echo "# planned 22 tests but ran $n"
exit 0
