#!/bin/sh
# tests/lib/slurm/start.sh [DIR]: start (or reuse) a private single-node Slurm
# (own munged, slurmctld, slurmd) whose whole state lives in DIR
# (default: ${TMPDIR:-/tmp}/burst-slurm). The system's /etc/slurm and
# /etc/munge are never used. Progress goes to stderr; the last line on stdout
# is the path of an env file to source (it sets SLURM_CONF and friends).
# Exit: 0 ready, 77 cannot run here (not root, Slurm/munge missing),
# 1 the daemons did not come up (tails of their logs are printed).
# Environment: BURST_SLURM_TIMEOUT (seconds to wait for readiness, default 30).
# Stop with tests/lib/slurm/stop.sh DIR.
set -u
PATH=${PATH:-/usr/bin:/bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
umask 022
me=slurm/start.sh
here=$(cd "$(dirname "$0")" && pwd)

skip() { echo "$me: SKIP: $*" >&2; exit 77; }
say() { echo "$me: $*" >&2; }

dir=${1:-${TMPDIR:-/tmp}/burst-slurm}
case $dir in /*) ;; *) dir=$(pwd)/$dir ;; esac

[ "$(id -u)" = 0 ] || skip "a private Slurm needs root (slurmd must run jobs); running as uid $(id -u)"
for p in slurmctld slurmd munged munge unmunge srun sinfo scontrol squeue scancel timeout; do
    command -v "$p" >/dev/null 2>&1 ||
        skip "'$p' not found (apt-get install -y slurm-wlm munge)"
done
[ -r /proc/net/tcp ] || skip "/proc/net/tcp not readable, cannot pick free ports"

# Never let an enclosing job's or the caller's Slurm settings leak in.
for v in $(env | sed -n 's/^\(SLURM_[A-Za-z0-9_]*\)=.*/\1/p;s/^\(SRUN_[A-Za-z0-9_]*\)=.*/\1/p;s/^\(SALLOC_[A-Za-z0-9_]*\)=.*/\1/p;s/^\(SBATCH_[A-Za-z0-9_]*\)=.*/\1/p'); do
    unset "$v"
done

mkdir -p "$dir" || exit 1
chmod 755 "$dir"
# Unix socket paths (munge, slurmstepd, PMIx, PMI2) are limited to 107 bytes:
# daemons see a long DIR through a short symbolic link in /tmp (same rule in
# stop.sh).
base=$dir
if [ ${#dir} -gt 40 ]; then
    base=/tmp/burst-slurm-$(printf %s "$dir" | cksum | cut -d' ' -f1)
    if [ -L "$base" ] || [ ! -e "$base" ]; then
        ln -sfn "$dir" "$base" || exit 1
    else
        say "$base exists and is not a symbolic link; give a shorter DIR"
        exit 1
    fi
fi
conf=$base/slurm.conf
envfile=$dir/env
sock=$base/munge/munge.socket
SLURM_CONF=$conf
export SLURM_CONF

# Serialise concurrent start/stop on the same DIR. fd 9 must never reach a
# daemon, or the lock would outlive this script (hence the 9>&- below).
if command -v flock >/dev/null 2>&1; then
    exec 9>"$dir/.lock"
    flock -w 120 9 || { say "cannot lock $dir/.lock"; exit 1; }
fi

timeout_s=${BURST_SLURM_TIMEOUT:-30}
node=$(hostname -s 2>/dev/null || uname -n)
node=${node%%.*}

# alive PIDFILE NAME: the pid file names a live process NAME started for DIR.
alive() {
    [ -s "$1" ] || return 1
    pid=$(cat "$1" 2>/dev/null) || return 1
    case $pid in '' | *[!0-9]*) return 1 ;; esac
    [ -r "/proc/$pid/cmdline" ] || return 1
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)
    case $cmd in *"$2"*"$base/"*) return 0 ;; esac
    return 1
}

all_alive() {
    alive "$dir/run/munged.pid" munged &&
        alive "$dir/run/slurmctld.pid" slurmctld &&
        alive "$dir/run/slurmd.pid" slurmd
}

srun_ok() {
    timeout -k 5 "${1:-20}" srun -n 1 -t 1 --quiet true </dev/null >/dev/null 2>&1
}

node_state() {
    timeout 10 sinfo -h -N -n "$node" -o %T 2>/dev/null | head -n 1
}

write_env() {
    cat >"$envfile.tmp" <<EOF
# Source me: private Slurm started by tests/lib/slurm/start.sh in $dir
for _burst_v in \$(env | sed -n 's/^\\(SLURM_[A-Za-z0-9_]*\\)=.*/\\1/p'); do unset "\$_burst_v"; done
unset _burst_v
# srun passes the caller's environment to the tasks, which need an exported PATH.
PATH=\${PATH:-/usr/local/bin:/usr/bin:/bin}; export PATH
SLURM_CONF=$dir/slurm.conf; export SLURM_CONF
# $(nproc) CPUs only: let srun/salloc/sbatch place more tasks than CPUs.
SLURM_OVERCOMMIT=1; export SLURM_OVERCOMMIT
SALLOC_OVERCOMMIT=1; export SALLOC_OVERCOMMIT
SBATCH_OVERCOMMIT=1; export SBATCH_OVERCOMMIT
BURST_SLURM_DIR=$dir; export BURST_SLURM_DIR
BURST_SLURM_NODE=$node; export BURST_SLURM_NODE
EOF
    mv -f "$envfile.tmp" "$envfile"
}

# 1. Reuse a healthy instance.
if [ -f "$conf" ] && all_alive && srun_ok 20; then
    say "reusing the running Slurm in $dir"
    write_env
    echo "$envfile"
    exit 0
fi

# 2. Otherwise stop whatever is left over and start afresh.
if alive "$dir/run/munged.pid" munged || alive "$dir/run/slurmctld.pid" slurmctld ||
    alive "$dir/run/slurmd.pid" slurmd; then
    say "the Slurm in $dir is unhealthy: restarting it"
    BURST_SLURM_LOCKED=1 sh "$here/stop.sh" "$dir" 9>&- >&2 || true
fi

rm -rf "$dir/state" "$dir/spool" "$dir/tmp" "$dir/run"
mkdir -p "$dir/state" "$dir/spool" "$dir/tmp" "$dir/run" "$dir/log" "$dir/munge" || exit 1
chmod 755 "$dir/munge" "$dir/run" "$dir/log"
: >"$dir/plugstack.conf"

dump_logs() {
    for f in "$dir"/log/munged.log "$dir"/log/slurmctld.log "$dir"/log/slurmd.log; do
        [ -f "$f" ] || continue
        echo "----- tail of $f" >&2
        tail -n 25 "$f" >&2
    done
}

fail() {
    say "FAILED: $*"
    dump_logs
    BURST_SLURM_LOCKED=1 sh "$here/stop.sh" "$dir" 9>&- >&2 || true
    exit 1
}

# 2a. munge, with its own key and socket.
if [ ! -s "$base/munge/munge.key" ]; then
    dd if=/dev/urandom of="$base/munge/munge.key" bs=1024 count=1 2>/dev/null ||
        fail "cannot create the munge key"
fi
chmod 600 "$base/munge/munge.key"
rm -f "$sock" "$sock.lock"
munged --socket="$sock" --key-file="$base/munge/munge.key" \
    --pid-file="$base/run/munged.pid" --log-file="$base/log/munged.log" \
    --seed-file="$base/munge/munged.seed" --num-threads=2 \
    </dev/null >>"$base/log/munged.log" 2>&1 9>&- ||
    fail "munged did not start"
i=0
until munge -n -S "$sock" 2>/dev/null | unmunge -S "$sock" >/dev/null 2>&1; do
    i=$((i + 1))
    [ $i -le 50 ] || fail "munged does not answer on $sock"
    sleep 0.1
done

# 2b. Two free TCP ports below the ephemeral range, derived from our pid.
port_busy() {
    hex=$(printf ':%04X' "$1")
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v h="$hex" '
        { n = split($2, a, ":"); if (":" a[n] == h) f = 1 } END { exit !f }'
}
port=$((10000 + ($$ * 37 + $(date +%s)) % 20000))
tries=0
while port_busy "$port" || port_busy $((port + 1)); do
    port=$((port + 2))
    [ $port -lt 30000 ] || port=10000
    tries=$((tries + 1))
    [ $tries -lt 5000 ] || fail "no free TCP port pair found"
done
ctld_port=$port
slurmd_port=$((port + 1))

# 2c. slurm.conf.
ncpu=$(nproc 2>/dev/null || echo 1)
memkb=$(awk '/^MemTotal:/ { print $2 }' /proc/meminfo)
mem=$((memkb * 9 / 10 / 1024))
[ "$mem" -ge 1 ] || mem=1
cat >"$conf" <<EOF
# Private single-node Slurm for burst's tests; written by tests/lib/slurm/start.sh.
ClusterName=burst
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$base/state
SlurmdSpoolDir=$base/spool
TmpFS=$base/tmp
SlurmctldPidFile=$base/run/slurmctld.pid
SlurmdPidFile=$base/run/slurmd.pid
SlurmctldLogFile=$base/log/slurmctld.log
SlurmdLogFile=$base/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$base/plugstack.conf
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=5
MinJobAge=60
InactiveLimit=0
MailProg=/bin/true
EnforcePartLimits=ALL
SlurmctldTimeout=60
SlurmdTimeout=120
MessageTimeout=20
NodeName=$node NodeAddr=127.0.0.1 NodeHostname=$node CPUs=$ncpu RealMemory=$mem State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
EOF

# 2d. The Slurm daemons (they daemonise themselves and write the pid files).
slurmctld -f "$conf" -c </dev/null >>"$base/log/slurmctld.log" 2>&1 9>&- ||
    fail "slurmctld did not start"
slurmd -f "$conf" </dev/null >>"$base/log/slurmd.log" 2>&1 9>&- ||
    fail "slurmd did not start"

# 3. Wait, bounded, until the node is idle and a one-task step runs.
start=$(date +%s)
state=
while :; do
    now=$(date +%s)
    left=$((timeout_s - (now - start)))
    [ $left -gt 0 ] || fail "not ready after ${timeout_s}s (node state: ${state:-none})"
    sleep 0.5
    if [ ! -s "$dir/run/slurmctld.pid" ] || [ ! -s "$dir/run/slurmd.pid" ]; then continue; fi
    all_alive || fail "a daemon died"
    state=$(node_state)
    case $state in idle | mixed | allocated) ;; *) continue ;; esac
    [ $left -gt 5 ] || left=5
    srun_ok "$left" && break
done
say "Slurm ready in $dir after $(($(date +%s) - start))s (node $node, ctld port $ctld_port, slurmd port $slurmd_port)"
write_env
echo "$envfile"
