#!/usr/bin/env bash
# slurm-local.sh — run a real Slurm (Debian's slurm-wlm 22.05) on this machine,
# under one directory, to compare with Loom by hand. It writes the same
# configuration as the Go package bench/slurm (a test checks that the files are
# byte for byte the same) and follows ../shared/design/SLURM.md.
#
# Usage:
#   scripts/slurm-local.sh start  [DIR]   write the config, start munged, slurmctld and
#                                         one slurmd per node; wait until all are idle
#   scripts/slurm-local.sh stop   [DIR]   cancel the jobs, stop every daemon by its pidfile
#   scripts/slurm-local.sh token  [DIR]   (REST=1) print a JWT for root: scontrol token
#   scripts/slurm-local.sh status [DIR]   which daemons run; sinfo
#   scripts/slurm-local.sh conf   [DIR]   only write slurm.conf and gres.conf
# DIR defaults to $SLURM_LOCAL_DIR, else /tmp/loom-slurm.
#
# Settings (environment): NODES (4), CPUS per node (16), GPUS per node (8, fake:
# symlinks to /dev/null), MEM (RealMemory in MB, unset: none), CTL_PORT (6817),
# NODE_PORT (17001: node i listens on NODE_PORT+i-1), NODE_FORMAT (node%d: node i's
# name, a printf format of i such as gpu-%04d), PARTITION (debug, the default, on
# every node), MORE_PARTITIONS (none: space-separated NAME[:MAXTIME_MINUTES], each on
# every node, each NAME once; no MAXTIME is INFINITE),
# CLUSTER_NAME (loombench), SCHED_PARAMS (batch_sched_delay=0),
# REST (0; 1: also JWT auth and slurmrestd on 127.0.0.1:REST_PORT), REST_PORT (6820).
#
# Then:  export SLURM_CONF=DIR/slurm.conf; cd DIR/work; sbatch --wrap hostname; squeue
# Needs root and: apt-get install -y --no-install-recommends munge slurmctld slurmd \
#                   slurm-client slurm-wlm-basic-plugins   (never the -emulator packages)
#      and for REST=1: slurmrestd slurm-wlm-jwt-plugin
# REST=1: requests to http://127.0.0.1:REST_PORT/slurm/v0.0.38/… need the headers
# X-SLURM-USER-NAME: root and X-SLURM-USER-TOKEN: $(scripts/slurm-local.sh token DIR).
set -euo pipefail

cmd=${1:-}
DIR=${2:-${SLURM_LOCAL_DIR:-/tmp/loom-slurm}}
NODES=${NODES:-4}
CPUS=${CPUS:-16}
GPUS=${GPUS:-8}
MEM=${MEM:-}
CTL_PORT=${CTL_PORT:-6817}
NODE_PORT=${NODE_PORT:-17001}
NODE_FORMAT=${NODE_FORMAT:-node%d}
PARTITION=${PARTITION:-debug}
MORE_PARTITIONS=${MORE_PARTITIONS:-}
# Its words as written: an unquoted $MORE_PARTITIONS would also expand each
# as a file name pattern ("s*" checked and written as the files it matches).
# Up to the end (-d ''), not its first line: the words after a newline were
# dropped. read answers 1 at the end of its input, which is no error here.
read -r -d '' -a more_partitions <<<"$MORE_PARTITIONS" || true
CLUSTER_NAME=${CLUSTER_NAME:-loombench}
SCHED_PARAMS=${SCHED_PARAMS:-batch_sched_delay=0}
REST=${REST:-0}
REST_PORT=${REST_PORT:-6820}

export PATH="$PATH:/usr/sbin:/sbin"
# A JWT in the environment kills the daemons and breaks srun (SLURM.md).
unset SLURM_JWT

die() { echo "slurm-local: $*" >&2; exit 1; }

int_in() { # name value min max
  [[ $2 =~ ^[0-9]+$ ]] && (( $2 >= $3 && $2 <= $4 )) || die "$1 must be $3..$4, got '$2'"
}

check_settings() {
  case $DIR in /*) ;; *) DIR=$(pwd)/$DIR ;; esac
  [[ $DIR =~ ^[^[:space:]#=]+$ ]] || die "DIR '$DIR' must not contain spaces, '#' or '='"
  int_in NODES "$NODES" 1 256
  int_in CPUS "$CPUS" 1 4096
  int_in GPUS "$GPUS" 0 64
  int_in CTL_PORT "$CTL_PORT" 1 65535
  int_in NODE_PORT "$NODE_PORT" 1 $((65536 - NODES))
  [[ -z $MEM ]] || int_in MEM "$MEM" 1 1000000000
  [[ $NODE_FORMAT =~ ^[a-z0-9_-]*%(0[1-9])?d[a-z0-9_-]*$ ]] ||
    die "NODE_FORMAT '$NODE_FORMAT' must be lower-case letters, digits, '-' or '_' around one %d (or %0Nd)"
  [[ $PARTITION =~ ^[a-z0-9_-]+$ ]] || die "PARTITION '$PARTITION' must be lower-case letters, digits, '-' or '_'"
  local p seen=" "
  for p in "${more_partitions[@]}"; do
    [[ $p =~ ^[a-z0-9_-]+(:[1-9][0-9]{0,6})?$ ]] ||
      die "MORE_PARTITIONS entry '$p' must be NAME or NAME:MINUTES (a name of lower-case letters, digits, '-' or '_'; 1..9999999 minutes)"
    [[ ${p%%:*} != "$PARTITION" ]] || die "MORE_PARTITIONS entry '$p' repeats PARTITION '$PARTITION'"
    # slurmctld keeps a partition's first line and ignores a repeat of it:
    # "short short:5" would give short no limit.
    [[ $seen != *" ${p%%:*} "* ]] || die "MORE_PARTITIONS entry '$p' repeats partition '${p%%:*}' (one entry a partition)"
    seen+="${p%%:*} "
  done
  [[ $CLUSTER_NAME =~ ^[a-z0-9_-]+$ ]] || die "CLUSTER_NAME '$CLUSTER_NAME' must be lower-case letters, digits, '-' or '_'"
  [[ $REST == 0 || $REST == 1 ]] || die "REST must be 0 or 1, got '$REST'"
  int_in REST_PORT "$REST_PORT" 1 65535
  [[ $SCHED_PARAMS =~ ^[^[:space:]#]+$ ]] || die "SCHED_PARAMS '$SCHED_PARAMS' must be one comma-separated word"
}

write_conf() {
  mkdir -p "$DIR"/{munge,state,spool,log,run,dev,work}
  chmod 755 "$DIR" "$DIR"/{munge,state,spool,log,run,dev,work}
  local i p
  for ((i = 0; i < GPUS; i++)); do ln -sfn /dev/null "$DIR/dev/nvidia$i"; done
  {
    echo "# Written by github.com/loom-ml/loom/bench/slurm (or scripts/slurm-local.sh). Edits are lost at the next start."
    echo "ClusterName=$CLUSTER_NAME"
    echo "SlurmctldHost=localhost"
    echo "SlurmctldPort=$CTL_PORT"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$DIR/munge/munge.socket.2"
    echo "StateSaveLocation=$DIR/state"
    echo "SlurmdSpoolDir=$DIR/spool/%n"
    echo "SlurmctldPidFile=$DIR/run/slurmctld.pid"
    echo "SlurmdPidFile=$DIR/run/slurmd-%n.pid"
    echo "SlurmctldLogFile=$DIR/log/slurmctld.log"
    echo "SlurmdLogFile=$DIR/log/slurmd-%n.log"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobCompType=jobcomp/filetxt"
    echo "JobCompLoc=$DIR/jobcomp.txt"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "GresTypes=gpu"
    echo "MailProg=/bin/true"
    echo "MpiDefault=none"
    echo "MaxJobCount=100000"
    echo "MaxArraySize=1001"
    echo "SchedulerParameters=$SCHED_PARAMS"
    echo "SlurmdParameters=config_overrides"
    echo "ReturnToService=2"
    if ((REST)); then
      # slurmrestd's users authenticate with a JWT that slurmctld checks with this key.
      echo "AuthAltTypes=auth/jwt"
      echo "AuthAltParameters=jwt_key=$DIR/jwt_hs256.key"
    fi
    local line
    for ((i = 1; i <= NODES; i++)); do
      line="NodeName=$(node_name "$i") NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((NODE_PORT + i - 1)) CPUs=$CPUS"
      [[ -z $MEM ]] || line+=" RealMemory=$MEM"
      ((GPUS == 0)) || line+=" Gres=gpu:$GPUS"
      echo "$line"
    done
    echo "PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
    for p in "${more_partitions[@]}"; do
      if [[ $p == *:* ]]; then
        echo "PartitionName=${p%%:*} Nodes=ALL Default=NO MaxTime=${p#*:} State=UP"
      else
        echo "PartitionName=$p Nodes=ALL Default=NO MaxTime=INFINITE State=UP"
      fi
    done
  } >"$DIR/slurm.conf"
  {
    echo "# Fake GPUs: each File is a symlink to /dev/null (a line without File= is dropped)."
    if ((GPUS > 0)); then
      local files="$DIR/dev/nvidia0"
      ((GPUS == 1)) || files="$DIR/dev/nvidia[0-$((GPUS - 1))]"
      for ((i = 1; i <= NODES; i++)); do echo "NodeName=$(node_name "$i") Name=gpu File=$files"; done
    fi
  } >"$DIR/gres.conf"
}

# node_name I: virtual node I's name (1-based), by NODE_FORMAT.
# shellcheck disable=SC2059 # NODE_FORMAT is the format, checked in check_settings.
node_name() { printf "$NODE_FORMAT" "$1"; }

# alive PIDFILE NAME: the pid in PIDFILE when it is a live NAME process.
alive() {
  local pid
  [[ -f $1 ]] || return 1
  pid=$(<"$1")
  [[ $pid =~ ^[0-9]+$ ]] && [[ -r /proc/$pid/comm ]] && [[ $(<"/proc/$pid/comm") == "$2" ]] || return 1
  echo "$pid"
}

# daemon name for a pidfile: slurmd-node1.pid → slurmd.
name_of() { local b; b=$(basename "$1" .pid); echo "${b%%-*}"; }

wait_for() { # what seconds command...
  local what=$1 secs=$2 end
  shift 2
  end=$((SECONDS + secs))
  until "$@"; do
    ((SECONDS < end)) || die "timed out after ${secs}s waiting for $what; logs in $DIR/log"
    sleep 0.2
  done
}

all_idle() {
  local n
  # A node is listed once per partition it is in (MORE_PARTITIONS): count names.
  n=$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 == "idle" { print $1 }' | sort -u | wc -l) || return 1
  ((n == NODES))
}

start() {
  [[ $(id -u) == 0 ]] || die "real Slurm needs root here (SlurmUser=root)"
  local b
  for b in munged mungekey slurmctld slurmd sinfo sbatch; do
    command -v "$b" >/dev/null || die "$b not found: apt-get install -y --no-install-recommends munge slurmctld slurmd slurm-client slurm-wlm-basic-plugins"
  done
  if ((REST)); then
    command -v slurmrestd >/dev/null && compgen -G "/usr/lib/*/slurm-wlm/auth_jwt.so" >/dev/null ||
      die "REST=1 needs slurmrestd and the JWT plugin: apt-get install -y --no-install-recommends slurmrestd slurm-wlm-jwt-plugin"
  fi
  local f running=""
  for f in "$DIR"/run/*.pid; do
    [[ -e $f ]] || continue
    if pid=$(alive "$f" "$(name_of "$f")"); then running+=" $(basename "$f" .pid)=$pid"; fi
  done
  [[ -z $running ]] || die "already running under $DIR:$running (stop it first)"
  write_conf
  export SLURM_CONF=$DIR/slurm.conf
  rm -f "$DIR/jobcomp.txt" "$DIR/munge/munge.socket.2"
  [[ -f $DIR/munge/munge.key ]] || mungekey -c -k "$DIR/munge/munge.key"
  if ((REST)); then
    [[ -s $DIR/jwt_hs256.key ]] || head -c 32 /dev/urandom >"$DIR/jwt_hs256.key"
    chmod 600 "$DIR/jwt_hs256.key"
  fi
  chmod 600 "$DIR/munge/munge.key"
  munged --socket="$DIR/munge/munge.socket.2" --key-file="$DIR/munge/munge.key" \
    --pid-file="$DIR/run/munged.pid" --seed-file="$DIR/munge/munged.seed" --log-file="$DIR/log/munged.log"
  wait_for "munged's socket" 15 test -S "$DIR/munge/munge.socket.2"
  # -c: start clean (no saved jobs, ids from 1). Daemons fork and write their pidfiles.
  (cd "$DIR" && slurmctld -c)
  local i
  for ((i = 1; i <= NODES; i++)); do
    mkdir -p "$DIR/spool/$(node_name "$i")"
    (cd "$DIR" && slurmd -N "$(node_name "$i")")
  done
  wait_for "$NODES nodes idle in sinfo" 60 all_idle
  ((REST)) && start_rest
  sinfo
  echo
  echo "export SLURM_CONF=$DIR/slurm.conf   # then e.g.: cd $DIR/work && sbatch --wrap hostname"
}

# start_rest runs slurmrestd in the background as nobody (it refuses root), with
# SLURM_JWT=daemon in its own environment only (SLURM.md), and records its pid.
start_rest() {
  SLURM_JWT=daemon setsid slurmrestd -u nobody -s openapi/v0.0.36,openapi/v0.0.37,openapi/v0.0.38 \
    "127.0.0.1:$REST_PORT" </dev/null >"$DIR/log/slurmrestd.log" 2>&1 &
  echo $! >"$DIR/run/slurmrestd.pid"
  wait_for "slurmrestd on 127.0.0.1:$REST_PORT" 30 rest_up
  echo "slurmrestd: http://127.0.0.1:$REST_PORT/slurm/v0.0.38/ (token: $0 token $DIR)"
}

rest_up() {
  # Not alive(): until setsid has exec'd, the process is not yet called slurmrestd.
  [[ -d /proc/$(<"$DIR/run/slurmrestd.pid") ]] || die "slurmrestd exited; its log ends: $(tail -5 "$DIR/log/slurmrestd.log")"
  (exec 3<>"/dev/tcp/127.0.0.1/$REST_PORT") 2>/dev/null
}

token() {
  alive "$DIR/run/slurmctld.pid" slurmctld >/dev/null || die "slurmctld is not running under $DIR"
  local out
  out=$(SLURM_CONF=$DIR/slurm.conf scontrol token username=root lifespan=3600) || exit 1
  echo "${out#SLURM_JWT=}"
}

stop() {
  export SLURM_CONF=$DIR/slurm.conf
  local f pid name pids=() i ids
  if alive "$DIR/run/slurmctld.pid" slurmctld >/dev/null; then
    # Every user's jobs, not only ours: a job left running outlives its slurmd
    # (slurmstepd and the job's processes stay).
    ids=$(timeout 5 squeue -h -o %A 2>/dev/null) || ids=""
    # shellcheck disable=SC2086 # one job id a word
    [[ -z $ids ]] || timeout 5 scancel $ids 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      ids=$(timeout 5 squeue -h -o %A 2>/dev/null) || break
      [[ -n $ids ]] || break
      sleep 0.2
    done
  fi
  # slurmrestd, the slurmds, then slurmctld, then munged.
  for f in "$DIR/run/slurmrestd.pid" "$DIR"/run/slurmd-*.pid "$DIR/run/slurmctld.pid" "$DIR/run/munged.pid"; do
    [[ -e $f ]] || continue
    name=$(name_of "$f")
    if pid=$(alive "$f" "$name"); then
      kill -TERM "$pid" && pids+=("$pid") && echo "stopping $(basename "$f" .pid) (pid $pid)"
    fi
    rm -f "$f"
  done
  for ((i = 0; i < 50; i++)); do
    local left=()
    for pid in "${pids[@]+"${pids[@]}"}"; do [[ -d /proc/$pid ]] && left+=("$pid"); done
    ((${#left[@]} == 0)) && return 0
    pids=("${left[@]}")
    sleep 0.2
  done
  for pid in "${pids[@]}"; do echo "killing pid $pid"; kill -KILL "$pid" 2>/dev/null || true; done
}

status() {
  local f pid any=0
  for f in "$DIR"/run/*.pid; do
    [[ -e $f ]] || continue
    any=1
    if pid=$(alive "$f" "$(name_of "$f")"); then
      echo "$(basename "$f" .pid): running (pid $pid)"
    else
      echo "$(basename "$f" .pid): not running (stale pidfile)"
    fi
  done
  ((any)) || { echo "nothing started under $DIR"; return 0; }
  if alive "$DIR/run/slurmctld.pid" slurmctld >/dev/null; then
    SLURM_CONF=$DIR/slurm.conf sinfo
  fi
}

case $cmd in
  start) check_settings; start ;;
  stop) check_settings; stop ;;
  status) check_settings; status ;;
  token) check_settings; token ;;
  conf) check_settings; write_conf; echo "$DIR/slurm.conf" ;;
  *) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
