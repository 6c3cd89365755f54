#!/bin/sh
# tests/lib/slurm/stop.sh [DIR]: stop the private Slurm that tests/lib/slurm/start.sh
# started in DIR (default: ${TMPDIR:-/tmp}/burst-slurm): cancel its jobs, then
# stop slurmd, slurmctld and munged by their pid files (SIGTERM, up to 10 s,
# then SIGKILL). Only processes whose command line names DIR are signalled;
# no file is removed. Exit 0 when nothing of DIR is left running.
set -u
PATH=${PATH:-/usr/bin:/bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
me=slurm/stop.sh

dir=${1:-${TMPDIR:-/tmp}/burst-slurm}
case $dir in /*) ;; *) dir=$(pwd)/$dir ;; esac
[ -d "$dir" ] || { echo "$me: no such directory: $dir" >&2; exit 0; }
# The daemons see a long DIR through a short link (see start.sh).
base=$dir
[ ${#dir} -le 40 ] || base=/tmp/burst-slurm-$(printf %s "$dir" | cksum | cut -d' ' -f1)

# start.sh calls us while holding the lock (BURST_SLURM_LOCKED=1).
if [ -z "${BURST_SLURM_LOCKED:-}" ] && command -v flock >/dev/null 2>&1 && [ -w "$dir" ]; then
    exec 9>"$dir/.lock"
    flock -w 60 9 2>/dev/null || echo "$me: $dir/.lock busy for 60s, going on" >&2
fi

# pid_of PIDFILE NAME: print the pid if it is a live NAME started for DIR.
pid_of() {
    [ -s "$1" ] || return 1
    pid=$(cat "$1" 2>/dev/null) || return 1
    case $pid in '' | *[!0-9]*) return 1 ;; esac
    [ -r "/proc/$pid/cmdline" ] || return 1
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)
    case $cmd in *"$2"*"$base/"*) echo "$pid"; return 0 ;; esac
    return 1
}

# Cancel the jobs first so slurmd can reap its slurmstepds (best effort).
if [ -f "$dir/slurm.conf" ] && pid_of "$dir/run/slurmctld.pid" slurmctld >/dev/null &&
    command -v squeue >/dev/null 2>&1; then
    jobs=$(SLURM_CONF=$dir/slurm.conf timeout 10 squeue -h -o %i 2>/dev/null)
    if [ -n "$jobs" ]; then
        # shellcheck disable=SC2086
        SLURM_CONF=$dir/slurm.conf timeout 10 scancel $jobs 2>/dev/null
        i=0
        while [ $i -lt 20 ] && [ -n "$(SLURM_CONF=$dir/slurm.conf timeout 5 squeue -h -o %i 2>/dev/null)" ]; do
            sleep 0.5
            i=$((i + 1))
        done
    fi
fi

# SIGTERM all three at once (each takes ~2 s to exit), then wait up to 10 s.
stopped=
pids=
for d in slurmd slurmctld munged; do
    pid=$(pid_of "$dir/run/$d.pid" "$d") || continue
    stopped="$stopped $d($pid)"
    pids="$pids $pid"
    kill -TERM "$pid" 2>/dev/null
done
i=0
while [ $i -lt 100 ]; do
    left=
    for pid in $pids; do
        kill -0 "$pid" 2>/dev/null && left="$left $pid"
    done
    pids=$left
    [ -n "$pids" ] || break
    sleep 0.1
    i=$((i + 1))
done
status=0
if [ -n "$pids" ]; then
    echo "$me: pids$pids ignored SIGTERM for 10 s, sending SIGKILL" >&2
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null
    sleep 0.5
    for pid in $pids; do
        kill -0 "$pid" 2>/dev/null && { echo "$me: $pid survives SIGKILL" >&2; status=1; }
    done
fi
echo "$me: ${dir}:${stopped:- nothing was running}${stopped:+ stopped}" >&2
exit $status
