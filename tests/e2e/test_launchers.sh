#!/bin/sh
# tests/e2e/test_launchers.sh — einrun --launcher srun|mpirun (issue 26,
# coordinator/run/co_launch.h).
#
# Without root (every make check): a fake srun and a fake mpirun ($EIN_SRUN,
# $EIN_MPIRUN) check the arguments they are given (one task on the named
# node, no per-task GPU binding; one rank, unbound) and start the agent on
# this machine with the variables Slurm / Open MPI would set; the FFN at
# P = 4 over 2 such hosts equals the one-host run, through each. A
# compressed node list (node[1-2]) is expanded by `scontrol show
# hostnames` (a fake one here). Outside an allocation --launcher srun is
# refused with a message; a launcher that exits at once is reported naming
# the host and the launcher; mpirun with a LAUNCH in the hosts file and an
# unknown launcher are refused.
#
# As root with Slurm (Debian slurmctld, slurmd, munge): a two-node Slurm
# cluster inside two network namespaces joined by a veth pair (munge key
# made here, slurm.conf with a node on each veth address, the controller in
# the first namespace, no cgroups: proctrack/linuxproc, task/none), then
# `salloc -N2 einrun --launcher srun` runs the FFN and must equal the
# one-host run; skipped with the reason (and the daemons' logs) where it
# cannot run. With Open MPI (openmpi-bin) too, the same through mpirun
# across the namespaces (its rsh agent a script doing `ip netns exec`).
# Everything is removed whatever happens: daemons, namespaces, files.
set -u
B=${EIN_BUILDDIR:-.}
B=$(cd "$B" && pwd)
EINRUN="$B/einrun"
NPYTOOL="$B/tests/e2e/npytool"
SRC=${EIN_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
S=$(mktemp -d "${TMPDIR:-/tmp}/ein-la.XXXXXX") || exit 1
chmod 755 "$S"
export TMPDIR="$S"
NA=ein-la-$$
NB=ein-lb-$$
netns=""
daemons=""

cleanup() {
    for f in $daemons; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
    [ -n "$netns" ] && ns_del "$NA" "$NB"
    rm -rf "$S"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP PIPE
cd "$S" || exit 1
. "$SRC/tests/e2e/lib.sh"

if ! grep -q '^#define HAVE_UCX 1' "$B/config.h" 2>/dev/null; then
    echo "1..0 # SKIP built without UCX (libucx-dev)"
    exit 0
fi
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export ASAN_OPTIONS
unset SLURM_JOB_ID SLURM_JOB_NODELIST SLURM_NODELIST SLURM_NNODES SLURM_JOB_NUM_NODES
unset EIN_SRUN EIN_MPIRUN

# The fake launchers: check the options, log them, run the agent here
# (the first word not an option, and the rest) as the real ones would.
cat > fake-srun <<'EOF'
#!/bin/sh
echo "$*" >> "$FAKE_LOG"
node=""
while [ $# -gt 0 ]; do
    case "$1" in
    --gpus-per-task*|--gres*|--gpu-bind*) echo "fake-srun: per-task GPU binding: $1" >&2; exit 3 ;;
    --nodelist=*) node=${1#--nodelist=} ;;
    --nodes=1|--ntasks=1|--overlap|--cpu-bind=none|--kill-on-bad-exit=1|--job-name=*) ;;
    -*) echo "fake-srun: unexpected option $1" >&2; exit 3 ;;
    *) break ;;
    esac
    shift
done
case ",$SLURM_JOB_NODELIST," in
*",$node,"*|*"["*) ;;
*) echo "fake-srun: node '$node' is not in the allocation ($SLURM_JOB_NODELIST)" >&2; exit 3 ;;
esac
[ -n "$node" ] || { echo "fake-srun: no --nodelist" >&2; exit 3; }
[ "${FAKE_FAIL:-}" = "$node" ] && { echo "srun: error: Unable to create step for job $SLURM_JOB_ID: Requested node configuration is not available" >&2; exit 1; }
SLURM_NODEID=0 SLURM_PROCID=0 SLURM_STEP_NUM_NODES=1 SLURMD_NODENAME=$node
UCX_TLS=tcp UCX_NET_DEVICES=lo
export SLURM_NODEID SLURM_PROCID SLURM_STEP_NUM_NODES SLURMD_NODENAME UCX_TLS UCX_NET_DEVICES
exec "$@"
EOF
cat > fake-mpirun <<'EOF'
#!/bin/sh
echo "$*" >> "$FAKE_LOG"
[ "$1 $2 $3" = "-np 1 --host" ] || { echo "fake-mpirun: expected -np 1 --host NODE: $*" >&2; exit 3; }
node=$4; shift 4
[ "$1 $2" = "--bind-to none" ] || { echo "fake-mpirun: expected --bind-to none: $*" >&2; exit 3; }
shift 2
if [ "$(id -u)" -eq 0 ]; then
    [ "$1" = --allow-run-as-root ] || { echo "fake-mpirun: root without --allow-run-as-root" >&2; exit 3; }
    shift
fi
OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1 PMIX_RANK=0 UCX_TLS=tcp UCX_NET_DEVICES=lo
export OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMIX_RANK UCX_TLS UCX_NET_DEVICES
exec "$@"
EOF
mkdir bin
cat > bin/scontrol <<'EOF'
#!/bin/sh
[ "$1 $2 $3" = "show hostnames node[1-2]" ] || { echo "fake scontrol: $*" >&2; exit 1; }
printf 'node1\nnode2\n'
EOF
chmod +x fake-srun fake-mpirun bin/scontrol
FAKE_LOG="$S/launch.log"
export FAKE_LOG

write_ffn ffn.ein
if ! "$EINRUN" -q --cpu 4 --seed 3 --output y=one.npy ffn.ein > one.txt 2>&1; then
    echo "1..0 # SKIP the one-host run failed: $(cat one.txt)"
    exit 0
fi

# einrun_env VAR=VALUE... -- ARGS: einrun ARGS with those variables set.
einrun_env() {
    (
        while [ "$1" != -- ]; do export "$1"; shift; done
        shift
        exec "$EINRUN" "$@"
    )
}

# same NAME VAR=VALUE... -- einrun args: the run equals the one-host run.
same() {
    name=$1; shift
    rm -f two.npy launch.log
    EIN_POISON=1 einrun_env "$@" -q --cpu 4 --seed 3 --iterations 2 --output y=two.npy \
        ffn.ein > two.txt 2>&1
    rc=$?
    if [ "$rc" -ne 0 ]; then not_ok "$name" "exit status $rc" "$(cat two.txt launch.log 2>/dev/null)"
    elif ! "$NPYTOOL" compare one.npy two.npy 1e-5 > cmp.txt 2>&1; then
        not_ok "$name" "differs from the one-host run:" "$(cat cmp.txt)"
    else ok "$name"
    fi
}

same "srun in an allocation: FFN at P = 4 over 2 nodes equals one host" \
    PATH="$S/bin:$PATH" SLURM_JOB_ID=42 SLURM_JOB_NODELIST='node[1-2]' SLURM_NNODES=2 \
    EIN_SRUN="$S/fake-srun" -- --launcher srun --listen 127.0.0.1
name="srun: one step per node, coordinator address and interface reported"
steps=$(grep -c -- '--nodes=1 --ntasks=1 --nodelist=node[12] ' launch.log 2>/dev/null)
if [ "${steps:-0}" -ne 2 ] ||
   ! grep -q -- '--nodelist=node1 .*--host 0 ' launch.log ||
   ! grep -q -- '--nodelist=node2 .*--host 1 ' launch.log; then
    not_ok "$name" "the launches:" "$(cat launch.log 2>/dev/null)"
elif ! grep -q 'coordinator at tcp://127.0.0.1:[0-9]*, interface lo, 2 hosts' two.txt; then
    not_ok "$name" "no coordinator line:" "$(cat two.txt)"
else ok "$name"
fi

printf '127.0.0.1 2\nnodeB 2\n' > hosts-mpi
same "mpirun over a hosts file: FFN at P = 4 over 2 hosts equals one host" \
    EIN_MPIRUN="$S/fake-mpirun" -- --launcher mpirun --hosts hosts-mpi
same "mpirun in a Slurm allocation, 2 devices per host: equals one host" \
    SLURM_JOB_ID=43 SLURM_JOB_NODELIST=nodeA,nodeB EIN_MPIRUN="$S/fake-mpirun" \
    -- --launcher mpirun --devices-per-host 2 --listen lo

# refused NAME PATTERN VAR=VALUE... -- einrun args: fails, PATTERN in its message.
refused() {
    name=$1; pat=$2; shift 2
    einrun_env "$@" -q --cpu 4 --seed 3 ffn.ein > bad.txt 2>&1
    rc=$?
    if [ "$rc" -eq 0 ]; then not_ok "$name" "it ran"
    elif ! grep -q -- "$pat" bad.txt; then not_ok "$name" "(status $rc) no '$pat' in:" "$(cat bad.txt)"
    elif [ -n "${EIN_TEST_SHOW:-}" ]; then ok "$name"; sed "s/^/#   /" bad.txt
    else ok "$name"
    fi
}
refused "srun outside an allocation is refused" "srun: not inside a Slurm allocation" \
    EIN_SRUN="$S/fake-srun" -- --launcher srun
refused "a launcher that fails at once is reported naming the host" \
    "host 1 (nodeB; devices 2-3): its agent ended; its launcher ($S/fake-srun, pid [0-9]*) exited with status 1" \
    SLURM_JOB_ID=44 SLURM_JOB_NODELIST=nodeA,nodeB FAKE_FAIL=nodeB EIN_SRUN="$S/fake-srun" \
    -- --launcher srun --listen 127.0.0.1
refused "devices that do not divide among the nodes are refused" \
    "srun: 3 nodes in the allocation, so 1 devices each, for a program on 4 devices" \
    SLURM_JOB_ID=45 SLURM_JOB_NODELIST=a,b,c EIN_SRUN="$S/fake-srun" -- --launcher srun
refused "a listen address not of this machine is refused" \
    "listen address '192.0.2.7': not an IPv4 address or interface of this machine" \
    SLURM_JOB_ID=46 SLURM_JOB_NODELIST=a,b EIN_SRUN="$S/fake-srun" -- --launcher srun \
    --listen 192.0.2.7
printf '127.0.0.1 2\nnodeB 2 ssh\n' > hosts-bad
refused "mpirun with a LAUNCH in the hosts file is refused" \
    "hosts-bad:2: a LAUNCH command (ssh) with launcher mpirun" \
    EIN_MPIRUN="$S/fake-mpirun" -- --launcher mpirun --hosts hosts-bad
refused "an unknown launcher is refused" "--launcher 'pbs': expected ssh, srun or mpirun" \
    -- --launcher pbs

# ---- A real Slurm cluster in two network namespaces (root). ----
real_skip() { ok "$1 # SKIP $2"; }
SL="srun through a two-node Slurm cluster in two network namespaces: FFN equals one host"
MP="mpirun across two network namespaces: FFN equals one host"
why=""
[ "$(id -u)" -eq 0 ] || why="needs root (network namespaces, Slurm daemons)"
[ -z "$why" ] && ! command -v ip > /dev/null 2>&1 && why="no ip command (iproute2)"
if [ -z "$why" ]; then
    netns=1
    if ! ns_add "$NA" 2> ns.txt || ! ns_add "$NB" 2> ns.txt ||
       ! ns_veth "$NA" "$NB" ein0 10.79.0.1 10.79.0.2 2> ns.txt; then
        why="cannot join two network namespaces with a veth pair: $(cat ns.txt)"
    fi
fi
# UCX between the namespaces over TCP on the veth (named ein0 in both).
UCX_TLS=tcp
UCX_NET_DEVICES=ein0
export UCX_TLS UCX_NET_DEVICES

# The Slurm cluster: munge with a key made here, slurmctld and one slurmd
# in the first namespace, one slurmd in the second; each daemon in its own
# UTS namespace with its node's name as host name.
slurm_why=$why
if [ -z "$slurm_why" ]; then
    for c in munged slurmctld slurmd salloc srun; do
        command -v $c > /dev/null 2>&1 || PATH="$PATH:/usr/sbin"
        command -v $c > /dev/null 2>&1 ||
            { slurm_why="no $c (Debian slurmctld, slurmd, slurm-client, munge)"; break; }
    done
fi
[ -z "$slurm_why" ] && ! command -v unshare > /dev/null 2>&1 && slurm_why="no unshare (util-linux)"
SD="$S/slurm"
slurm_logs() { for f in "$SD"/*.log "$SD"/munge/log; do [ -f "$f" ] && { echo "== $f"; tail -n 15 "$f"; }; done; }
if [ -z "$slurm_why" ]; then
    mkdir -p "$SD/munge" "$SD/state" "$SD/spool/einA" "$SD/spool/einB"
    chmod 700 "$SD/munge"
    dd if=/dev/urandom of="$SD/munge.key" bs=1024 count=1 2> /dev/null
    chmod 400 "$SD/munge.key"
    cat > "$SD/slurm.conf" <<EOF
ClusterName=ein
SlurmctldHost=einA(10.79.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SD/munge/sock
CredType=cred/munge
StateSaveLocation=$SD/state
SlurmdSpoolDir=$SD/spool/%n
SlurmctldPidFile=$SD/slurmctld.pid
SlurmdPidFile=$SD/slurmd.%n.pid
SlurmctldLogFile=$SD/slurmctld.log
SlurmdLogFile=$SD/slurmd.%n.log
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/linear
SlurmdParameters=config_overrides
ReturnToService=2
InactiveLimit=0
KillWait=2
NodeName=einA NodeAddr=10.79.0.1 CPUs=2 State=UNKNOWN
NodeName=einB NodeAddr=10.79.0.2 CPUs=2 State=UNKNOWN
PartitionName=ein Nodes=einA,einB Default=YES MaxTime=INFINITE State=UP
EOF
    # No cgroups: the v1 plugin is loaded (22.05 always loads one) but
    # constrains nothing; autodetect fails where /sys/fs/cgroup is a tmpfs.
    printf 'CgroupPlugin=cgroup/v1\nCgroupAutomount=no\nConstrainCores=no\nConstrainRAMSpace=no\nConstrainDevices=no\n' \
        > "$SD/cgroup.conf"
    SLURM_CONF="$SD/slurm.conf"
    export SLURM_CONF
    daemons="$SD/munge/pid $SD/slurmctld.pid $SD/slurmd.einA.pid $SD/slurmd.einB.pid"
    if ! munged --force --socket="$SD/munge/sock" --key-file="$SD/munge.key" \
            --pid-file="$SD/munge/pid" --log-file="$SD/munge/log" --seed-file="$SD/munge/seed" \
            > "$SD/munged.out" 2>&1; then
        slurm_why="munged did not start: $(cat "$SD/munged.out")"
    elif ! ip netns exec "$NA" unshare --uts sh -c 'hostname einA && exec slurmctld -i' \
            > "$SD/start.out" 2>&1 ||
         ! ip netns exec "$NA" unshare --uts sh -c 'hostname einA && exec slurmd -N einA' \
            >> "$SD/start.out" 2>&1 ||
         ! ip netns exec "$NB" unshare --uts sh -c 'hostname einB && exec slurmd -N einB' \
            >> "$SD/start.out" 2>&1; then
        slurm_why="the Slurm daemons did not start: $(cat "$SD/start.out")"
    else
        i=0
        while [ $i -lt 100 ] &&
              [ "$(ip netns exec "$NA" sinfo -h -o %t 2> /dev/null | sort -u)" != idle ]; do
            sleep 0.1; i=$((i + 1))
        done
        [ $i -lt 100 ] || slurm_why="the two nodes did not come up: $(ip netns exec "$NA" sinfo 2>&1)"
    fi
    if [ -n "$slurm_why" ]; then
        echo "# $slurm_why"
        slurm_logs | sed 's/^/# /'
    fi
fi
if [ -n "$slurm_why" ]; then
    real_skip "$SL" "$slurm_why"
else
    rm -f two.npy
    EIN_POISON=1 timeout 60 ip netns exec "$NA" salloc -N2 --immediate=20 -Q \
        "$EINRUN" -q --cpu 4 --seed 3 --iterations 2 --output y=two.npy --launcher srun \
        --listen ein0 ffn.ein > two.txt 2>&1
    rc=$?
    if [ "$rc" -ne 0 ]; then not_ok "$SL" "exit status $rc" "$(cat two.txt)" "$(slurm_logs)"
    elif ! "$NPYTOOL" compare one.npy two.npy 1e-5 > cmp.txt 2>&1; then
        not_ok "$SL" "differs from the one-host run:" "$(cat cmp.txt)"
    elif ! grep -q 'coordinator at tcp://10.79.0.1:[0-9]*, interface ein0, 2 hosts' two.txt; then
        not_ok "$SL" "no coordinator line:" "$(cat two.txt)"
    # (one step on each node; their numbers depend on which srun reached
    # slurmctld first)
    elif ! grep -q 'launch task StepId=[0-9]*\.[0-9]* ' "$SD/slurmd.einA.log" ||
         ! grep -q 'launch task StepId=[0-9]*\.[0-9]* ' "$SD/slurmd.einB.log"; then
        not_ok "$SL" "no job step on einA and on einB:" "$(slurm_logs)"
    else ok "$SL"
    fi
fi

# Open MPI across the namespaces: mpirun in the first, its daemon (orted)
# started in the second by an rsh agent that does `ip netns exec`.
mpi_why=$why
[ -z "$mpi_why" ] && ! command -v mpirun > /dev/null 2>&1 && mpi_why="no mpirun (Debian openmpi-bin)"
[ -z "$mpi_why" ] && ! mpirun --version 2>&1 | grep -q 'Open MPI' && mpi_why="mpirun is not Open MPI's"
if [ -n "$mpi_why" ]; then
    real_skip "$MP" "$mpi_why"
else
    cat > rsh <<EOF
#!/bin/sh
# Open MPI's rsh agent: HOST COMMAND... -> the command in HOST's namespace.
h=\$1; shift
echo "\$h" >> "$S/rsh.log"
case "\$h" in 10.79.0.1) ns=$NA ;; 10.79.0.2) ns=$NB ;; *) echo "rsh: unknown host \$h" >&2; exit 1 ;; esac
exec ip netns exec "\$ns" sh -c "\$*"
EOF
    chmod +x rsh
    printf '10.79.0.1 2\n10.79.0.2 2\n' > hosts-ns
    rm -f two.npy
    EIN_POISON=1 EIN_MPIRUN="mpirun --mca plm_rsh_agent $S/rsh --mca oob_tcp_if_include ein0 --mca btl self,tcp --mca btl_tcp_if_include ein0 -x UCX_TLS -x UCX_NET_DEVICES -x TMPDIR -x ASAN_OPTIONS" \
        timeout 60 ip netns exec "$NA" "$EINRUN" -q --cpu 4 --seed 3 --iterations 2 \
        --output y=two.npy --launcher mpirun --hosts hosts-ns ffn.ein > two.txt 2>&1
    rc=$?
    if [ "$rc" -ne 0 ]; then not_ok "$MP" "exit status $rc" "$(cat two.txt)"
    elif ! "$NPYTOOL" compare one.npy two.npy 1e-5 > cmp.txt 2>&1; then
        not_ok "$MP" "differs from the one-host run:" "$(cat cmp.txt)"
    elif ! grep -qx 10.79.0.2 rsh.log; then
        not_ok "$MP" "mpirun did not start a daemon in the second namespace"
    else ok "$MP"
    fi
fi
echo "1..$n"
