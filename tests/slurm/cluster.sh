#!/usr/bin/env bash
# A single-node Slurm cluster for tests: munged, slurmctld and slurmd on loopback ports, every
# file in DIR, no systemd. Needs root and Debian's slurm-wlm and munge (scripts/setup.sh).
#   tests/slurm/cluster.sh start DIR   prints "export SLURM_CONF=DIR/slurm.conf" once the node is idle
#   tests/slurm/cluster.sh stop DIR    stops what start started
set -euo pipefail
cmd=${1:?start or stop} dir=${2:?a folder for the cluster}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

stop() {
  for pidfile in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
    [[ -f $pidfile ]] || continue
    kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  for _ in $(seq 50); do
    alive=0
    for pidfile in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
      [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null && alive=1
    done
    ((alive)) || break
    sleep 0.1
  done
  rm -f "$dir"/*.pid
}

if [[ $cmd == stop ]]; then
  stop
  exit 0
fi
[[ $cmd == start ]] || { echo "cluster.sh: start or stop, not $cmd" >&2; exit 2; }
for tool in munged slurmctld slurmd sbatch; do
  command -v "$tool" >/dev/null || { echo "cluster.sh: $tool not found; install slurm-wlm and munge (scripts/setup.sh)" >&2; exit 1; }
done

# munge: a key of its own, its socket in DIR (clients find it through the slurm.conf below).
mkdir -p "$dir/munge" "$dir/state" "$dir/spool"
[[ -f $dir/munge/munge.key ]] || head -c 1024 /dev/urandom >"$dir/munge/munge.key"
chmod 700 "$dir/munge"
chmod 400 "$dir/munge/munge.key"
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed"

# Two free loopback ports.
read -r ctld_port slurmd_port < <(python3 - <<'PY'
import socket
ports = []
socks = []
for _ in range(2):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ports.append(s.getsockname()[1]); socks.append(s)
print(*ports)
PY
)
cpus=$(nproc)
mem=$(awk '/MemTotal/ {print int($2 / 1024 / 2)}' /proc/meminfo)
cat >"$dir/slurm.conf" <<CONF
ClusterName=embcache-test
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
MinJobAge=300
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$dir/slurm.conf
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 100); do
  if sinfo -h -o "%t" 2>/dev/null | grep -qE "^idle"; then
    echo "export SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  sleep 0.2
done
echo "cluster.sh: the node did not become idle within 20 s; see $dir/slurmctld.log and $dir/slurmd.log" >&2
stop
exit 1
