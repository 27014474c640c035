#!/usr/bin/env bash
# Brings up a real multi-node Slurm cluster on this one machine, for ax's integration tests (job
# scripts, launcher, SPANK plugin, PMIx bootstrap). Recipe: shared/reference/slurm-on-one-machine.md.
#
#   scripts/slurm-cluster.sh up     [--nodes N] [--gpus-per-node G] [--state-dir DIR] [--plugstack FILE]
#   scripts/slurm-cluster.sh down   [--state-dir DIR]
#   scripts/slurm-cluster.sh status [--state-dir DIR]
#
# One slurmctld ("axctl", 127.0.0.10) and N slurmd ("n1".."nN", 127.0.0.11..), each daemon in its own
# UTS namespace so `hostname` in a task prints its node name. G fake GPUs per node through GRES
# (symlinks to /dev/null). mpi/pmix is available (`srun --mpi=pmix`), MpiDefault=none.
# No systemd needed; must run as root; installs nothing (run scripts/setup.sh --with slurm).
#
# Clients: export SLURM_CONF=DIR/etc/slurm.conf (printed by `up`); /etc/slurm/slurm.conf is also
# symlinked to it when /etc/slurm/slurm.conf is absent or already one of our links.
#
# Environment knobs: AX_SLURM_CPUS (16 per node), AX_SLURM_MEM_MB (8000), AX_SLURM_PORT_BASE
# (17000: node i listens on PORT_BASE+i), AX_SLURM_CTLD_PORT (6817), AX_SLURM_MPI_DEFAULT (none),
# AX_SLURM_UP_TIMEOUT (30 s until all nodes idle), AX_SLURM_CLIENT_TIMEOUT (20 s per client call).
set -euo pipefail

usage() {
  sed -n '5,7p' "$0" | sed 's/^# *//' >&2
  exit 2
}

cmd="${1:-}"
[[ -n "$cmd" ]] || usage
shift
nodes=2
gpus=8
state_dir=/tmp/ax-slurm
plugstack=""
while (($# > 0)); do
  case "$1" in
    --nodes) nodes="${2:?--nodes needs a value}"; shift ;;
    --gpus-per-node) gpus="${2:?--gpus-per-node needs a value}"; shift ;;
    --state-dir) state_dir="${2:?--state-dir needs a value}"; shift ;;
    --plugstack) plugstack="${2:?--plugstack needs a value}"; shift ;;
    -h | --help) usage ;;
    *) echo "slurm-cluster: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done
if ! [[ "$nodes" =~ ^[0-9]+$ ]] || ((nodes < 1 || nodes > 200)); then
  echo "slurm-cluster: --nodes must be 1..200" >&2
  exit 2
fi
if ! [[ "$gpus" =~ ^[0-9]+$ ]] || ((gpus > 64)); then
  echo "slurm-cluster: --gpus-per-node must be 0..64" >&2
  exit 2
fi
mkdir -p "$state_dir"
D="$(cd "$state_dir" && pwd)"
[[ "$D" != / ]] || { echo "slurm-cluster: --state-dir must not be /" >&2; exit 2; }
if [[ -n "$plugstack" ]]; then
  [[ -f "$plugstack" ]] || { echo "slurm-cluster: --plugstack file '$plugstack' not found" >&2; exit 2; }
  plugstack="$(cd "$(dirname "$plugstack")" && pwd)/$(basename "$plugstack")"
fi

CPUS="${AX_SLURM_CPUS:-16}"
MEM_MB="${AX_SLURM_MEM_MB:-8000}"
PORT_BASE="${AX_SLURM_PORT_BASE:-17000}"
CTLD_PORT="${AX_SLURM_CTLD_PORT:-6817}"
MPI_DEFAULT="${AX_SLURM_MPI_DEFAULT:-none}"
UP_TIMEOUT="${AX_SLURM_UP_TIMEOUT:-30}"
CLIENT_TIMEOUT="${AX_SLURM_CLIENT_TIMEOUT:-20}"
CTL_NAME=axctl
CTL_ADDR=127.0.0.10
HOSTS_TAG="# ax-slurm:$D"
CONF="$D/etc/slurm.conf"
export SLURM_CONF="$CONF"

log() { echo "slurm-cluster: $*"; }
die() { echo "slurm-cluster: error: $*" >&2; exit 1; }
# Every client call goes through this: a wedged slurmctld or srun must never hang the caller.
t() { timeout -k 5 "$CLIENT_TIMEOUT" "$@"; }

need_root() { [[ $(id -u) == 0 ]] || die "must run as root (UTS namespaces, /etc/hosts, munged)"; }

check_binaries() {
  local b missing=()
  for b in slurmctld slurmd sinfo srun sbatch scontrol squeue scancel munged munge unmunge unshare; do
    command -v "$b" >/dev/null 2>&1 || [[ -x /usr/sbin/$b ]] || missing+=("$b")
  done
  ((${#missing[@]} == 0)) || die "missing ${missing[*]}: run scripts/setup.sh --with slurm"
}

# pid_alive FILE NAME: the pid in FILE is a live process whose comm is NAME.
pid_alive() {
  local pid
  [[ -s "$1" ]] || return 1
  pid="$(tr -dc 0-9 <"$1")"
  [[ -n "$pid" && -r /proc/$pid/comm && "$(cat /proc/"$pid"/comm 2>/dev/null)" == "$2" ]]
}

# stop_pids NAME PID...: SIGTERM to each pid whose comm is NAME, all at once (a slurmd takes ~2 s
# to exit), wait up to 10 s for all, then SIGKILL the rest.
stop_pids() {
  local name="$1" pid i pids=()
  shift
  for pid in "$@"; do
    [[ "$(cat /proc/"$pid"/comm 2>/dev/null)" == "$name" ]] && kill -TERM "$pid" 2>/dev/null &&
      pids+=("$pid")
  done
  for ((i = 0; i <= 100; i++)); do
    local alive=()
    for pid in "${pids[@]}"; do
      [[ "$(cat /proc/"$pid"/comm 2>/dev/null)" == "$name" ]] && alive+=("$pid")
    done
    ((${#alive[@]} > 0)) || return 0
    pids=("${alive[@]}")
    ((i < 100)) && sleep 0.1
  done
  for pid in "${pids[@]}"; do
    log "$name ($pid) ignored SIGTERM for 10 s, sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  done
}

# stop_pidfiles NAME FILE...: stop_pids on the pids in FILEs; removes the files.
stop_pidfiles() {
  local name="$1" f pids=()
  shift
  for f in "$@"; do
    [[ -e "$f" ]] || continue
    pid_alive "$f" "$name" && pids+=("$(tr -dc 0-9 <"$f")")
    rm -f "$f"
  done
  stop_pids "$name" "${pids[@]}"
}

# Daemons started from our slurm.conf whose pid files are gone (a crashed run, a removed state
# dir): found by the config path on their command line, never by name alone.
stop_strays() {
  local pid ctlds=() slurmds=()
  for pid in $(pgrep -x 'slurmctld|slurmd' 2>/dev/null || true); do
    tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "-f $CONF " || continue
    case "$(cat /proc/"$pid"/comm 2>/dev/null)" in
      slurmctld) ctlds+=("$pid") ;;
      slurmd) slurmds+=("$pid") ;;
    esac
  done
  ((${#ctlds[@]} + ${#slurmds[@]} > 0)) || return 0
  log "stopping daemons of $D without pid files: ${ctlds[*]} ${slurmds[*]}"
  stop_pids slurmd "${slurmds[@]}" &
  stop_pids slurmctld "${ctlds[@]}"
  wait
}

node_name() { echo "n$1"; }
node_addr() { echo "127.0.0.$((10 + $1))"; }

write_configs() {
  local i n
  mkdir -p "$D/etc" "$D/log" "$D/run" "$D/spool/ctld" "$D/tmp" "$D/dev"
  local node_line
  if ((nodes == 1)); then
    node_line="NodeName=n1 NodeAddr=$(node_addr 1) Port=$((PORT_BASE + 1))"
  else
    node_line="NodeName=n[1-$nodes] NodeAddr=127.0.0.[11-$((10 + nodes))] Port=[$((PORT_BASE + 1))-$((PORT_BASE + nodes))]"
  fi
  node_line+=" CPUs=$CPUS RealMemory=$MEM_MB"
  ((gpus > 0)) && node_line+=" Gres=gpu:$gpus"
  node_line+=" State=UNKNOWN"
  {
    echo "# Generated by scripts/slurm-cluster.sh: $nodes nodes x $gpus fake GPUs"
    cat <<EOF
ClusterName=axci
SlurmctldHost=$CTL_NAME($CTL_ADDR)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$D/spool/ctld
SlurmdSpoolDir=$D/spool/%n
TmpFS=$D/tmp/%n
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SwitchType=switch/none
MpiDefault=$MPI_DEFAULT
ReturnToService=2
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
PlugStackConfig=$D/etc/plugstack.conf
KillWait=5
MinJobAge=30
# Schedule a submitted batch job at the controller's next 1 s pass instead of waiting for the
# default batch_sched_delay of 3 s (a high-throughput knob): one job after another, as the test
# suite submits them, started 2-3 s after sbatch; now within a second. Scheduling decisions are
# the same, only sooner.
SchedulerParameters=batch_sched_delay=0
InactiveLimit=0
# Job ids from a range of this cluster's own (by its controller port), so that two clusters on
# one machine (a hand-made one beside the test suite's) never hand out the same job id, and so
# never the same coordinator port to their jobs' steps (spank-plugin.md's rule).
FirstJobId=$(( (CTLD_PORT % 100) * 100000 + 1 ))
EOF
    ((gpus > 0)) && echo "GresTypes=gpu"
    echo "$node_line"
    echo "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  } >"$CONF.new"

  {
    echo "AutoDetect=off"
    if ((gpus > 0)); then
      for ((i = 1; i <= nodes; i++)); do
        n="$(node_name "$i")"
        echo "NodeName=$n Name=gpu File=$D/dev/$n/nvidia[0-$((gpus - 1))]"
      done
    fi
  } >"$D/etc/gres.conf.new"

  if [[ -n "$plugstack" ]]; then
    echo "include $plugstack" >"$D/etc/plugstack.conf.new"
  else
    : >"$D/etc/plugstack.conf.new"
  fi
}

# True when the running cluster was started from exactly the configs we would write now.
configs_unchanged() {
  local f
  for f in slurm.conf gres.conf plugstack.conf; do
    cmp -s "$D/etc/$f" "$D/etc/$f.new" || return 1
  done
}

install_configs() {
  local f
  for f in slurm.conf gres.conf plugstack.conf; do mv -f "$D/etc/$f.new" "$D/etc/$f"; done
}

all_daemons_alive() {
  local i
  pid_alive "$D/run/slurmctld.pid" slurmctld || return 1
  for ((i = 1; i <= nodes; i++)); do pid_alive "$D/run/slurmd-$(node_name "$i").pid" slurmd || return 1; done
}

idle_count() {
  t sinfo -h -N -o '%N %T' 2>/dev/null | awk '$2 ~ /^idle/ {print $1}' | sort -u | wc -l
}

start_munge() {
  if t munge -n 2>/dev/null | t unmunge >/dev/null 2>&1; then
    return 0 # reuse a running munged (ours from an earlier up, or the machine's)
  fi
  if [[ ! -s /etc/munge/munge.key ]]; then
    mkdir -p /etc/munge
    if command -v mungekey >/dev/null 2>&1; then
      mungekey --create --keyfile=/etc/munge/munge.key
    else
      head -c 1024 /dev/urandom >/etc/munge/munge.key
    fi
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 600 /etc/munge/munge.key
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
  runuser -u munge -- /usr/sbin/munged
  local i
  for ((i = 0; i < 50; i++)); do
    if t munge -n 2>/dev/null | t unmunge >/dev/null 2>&1; then
      cp /run/munge/munged.pid "$D/run/munged.pid"
      return 0
    fi
    sleep 0.1
  done
  tail -n 20 /var/log/munge/munged.log >&2 2>/dev/null || true
  die "munged did not come up"
}

hosts_add() {
  local i tmp
  tmp="$(mktemp)"
  grep -vF "$HOSTS_TAG" /etc/hosts >"$tmp" || true
  echo "$CTL_ADDR $CTL_NAME $HOSTS_TAG" >>"$tmp"
  for ((i = 1; i <= nodes; i++)); do echo "$(node_addr "$i") $(node_name "$i") $HOSTS_TAG" >>"$tmp"; done
  cat "$tmp" >/etc/hosts # in place: /etc/hosts may be a bind mount
  rm -f "$tmp"
}

hosts_remove() {
  local tmp
  grep -qF "$HOSTS_TAG" /etc/hosts 2>/dev/null || return 0
  tmp="$(mktemp)"
  grep -vF "$HOSTS_TAG" /etc/hosts >"$tmp" || true
  cat "$tmp" >/etc/hosts
  rm -f "$tmp"
}

etc_links_add() {
  local f
  mkdir -p /etc/slurm
  for f in slurm.conf gres.conf; do
    if [[ ! -e /etc/slurm/$f || -L /etc/slurm/$f ]]; then
      local cur
      cur="$(readlink /etc/slurm/$f 2>/dev/null || true)"
      if [[ -z "$cur" || "$cur" == /tmp/* || "$cur" == "$D/"* || ! -e "$cur" ]]; then
        ln -sfn "$D/etc/$f" "/etc/slurm/$f"
      fi
    fi
  done
}

etc_links_remove() {
  local f
  for f in slurm.conf gres.conf; do
    if [[ -L /etc/slurm/$f && "$(readlink /etc/slurm/$f)" == "$D/"* ]]; then rm -f "/etc/slurm/$f"; fi
  done
}

dump_logs() {
  echo "---- sinfo -N -l" >&2
  t sinfo -N -l >&2 2>&1 || true
  local f
  for f in "$D"/log/*.log; do
    [[ -e "$f" ]] || continue
    echo "---- tail $f" >&2
    tail -n 25 "$f" >&2
  done
}

cmd_down() {
  need_root
  if pid_alive "$D/run/slurmctld.pid" slurmctld; then
    t scancel --quiet --partition=main 2>/dev/null || true
    local i
    for ((i = 0; i < 100; i++)); do
      [[ -z "$(t squeue -h 2>/dev/null)" ]] && break
      sleep 0.1
    done
  fi
  # In parallel: slurmctld alone takes 2-4 s to save its state and exit.
  stop_pidfiles slurmd "$D"/run/slurmd-*.pid &
  stop_pidfiles slurmctld "$D/run/slurmctld.pid"
  wait
  stop_strays
  # Only the munged this script started (a machine-wide one is left alone), and not while another
  # cluster's daemons on this machine still authenticate through it.
  local others
  others="$(pgrep -x 'slurmctld|slurmd' 2>/dev/null | tr '\n' ' ' || true)"
  if [[ -n "$others" ]]; then
    [[ -e "$D/run/munged.pid" ]] && log "leaving munged running: Slurm daemons $others use it"
    rm -f "$D/run/munged.pid"
  else
    stop_pidfiles munged "$D/run/munged.pid"
  fi
  # Leftover slurmstepd of our nodes (a job that ignored scancel): match on our state dir's spool.
  local pid
  for pid in $(pgrep -x slurmstepd 2>/dev/null || true); do
    if tr '\0' ' ' 2>/dev/null <"/proc/$pid/environ" | grep -qF "SLURM_CONF=$CONF" ||
      grep -qF "$D/" "/proc/$pid/cmdline" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  hosts_remove
  etc_links_remove
  rm -rf "${D:?}/spool" "${D:?}/run" "${D:?}/tmp" "${D:?}/dev"
  log "down ($D; configs and logs kept)"
}

cmd_up() {
  need_root
  check_binaries
  write_configs
  if configs_unchanged && all_daemons_alive && (($(idle_count) >= nodes)); then
    rm -f "$D"/etc/*.new
    hosts_add
    log "already up: $nodes nodes x $gpus GPUs ($D)"
    echo "export SLURM_CONF=$CONF"
    return 0
  fi
  # Something differs or is dead: tear down whatever an earlier up in this state dir left running.
  if compgen -G "$D/run/*.pid" >/dev/null; then
    log "restarting: an earlier instance in $D is stale or configured differently"
    cmd_down >/dev/null
  fi
  install_configs
  rm -rf "${D:?}/log" "${D:?}/tmp" "${D:?}/spool" "${D:?}/dev"
  mkdir -p "$D/log" "$D/run" "$D/spool/ctld" "$D/tmp" "$D/dev"
  local i n g
  for ((i = 1; i <= nodes; i++)); do
    n="$(node_name "$i")"
    mkdir -p "$D/spool/$n" "$D/tmp/$n" "$D/dev/$n"
    for ((g = 0; g < gpus; g++)); do ln -sfn /dev/null "$D/dev/$n/nvidia$g"; done
  done
  hosts_add
  etc_links_add
  start_munge

  # The port must be free, or slurmctld fails in the background with only a log line.
  if command -v ss >/dev/null 2>&1 && ss -Hltn "sport = :$CTLD_PORT" 2>/dev/null | grep -q .; then
    die "port $CTLD_PORT is taken (another slurmctld?); set AX_SLURM_CTLD_PORT"
  fi
  unshare --uts --fork bash -c "hostname $CTL_NAME && exec slurmctld -c -f '$CONF'" ||
    { dump_logs; die "slurmctld failed to start"; }
  for ((i = 0; i < 100; i++)); do
    t scontrol ping 2>/dev/null | grep -q 'is UP' && break
    sleep 0.1
  done
  t scontrol ping 2>/dev/null | grep -q 'is UP' || { dump_logs; die "slurmctld not answering after 10 s"; }

  for ((i = 1; i <= nodes; i++)); do
    n="$(node_name "$i")"
    unshare --uts --fork bash -c "hostname $n && exec slurmd -f '$CONF' -N $n" ||
      { dump_logs; die "slurmd $n failed to start"; }
  done

  local deadline=$((SECONDS + UP_TIMEOUT)) idle=0
  while ((SECONDS < deadline)); do
    idle="$(idle_count)"
    ((idle >= nodes)) && break
    sleep 0.1
  done
  if ((idle < nodes)); then
    dump_logs
    die "only $idle of $nodes nodes idle after ${UP_TIMEOUT}s (logs above; tear down with: $0 down --state-dir $D)"
  fi
  log "up: $nodes nodes x $gpus GPUs, controller $CTL_NAME:$CTLD_PORT ($D)"
  echo "export SLURM_CONF=$CONF"
}

cmd_status() {
  if ! pid_alive "$D/run/slurmctld.pid" slurmctld; then
    echo "slurm-cluster: not running ($D)"
    return 1
  fi
  echo "state dir: $D   SLURM_CONF=$CONF"
  t sinfo -N -o '%N %T %c %m %G' || return 1
  t scontrol show nodes -o 2>/dev/null |
    sed -E 's/.*NodeName=([^ ]+).*NodeAddr=([^ ]+).*NodeHostName=([^ ]+).*State=([^ ]+).*/\1 addr=\2 host=\3 state=\4/' ||
    true
}

case "$cmd" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) usage ;;
esac
