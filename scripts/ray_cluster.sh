#!/usr/bin/env bash
# Ray cluster start-up for soft_spatial, inside or outside Slurm.
#
#   scripts/ray_cluster.sh [options] launch -- python -m soft_spatial.train experiment=adaptsoft ...
#   scripts/ray_cluster.sh [options] head|worker|wait|stop|nodes
#
# Subcommands
#   launch -- CMD...  Driver mode (what slurm/*.sbatch call). Starts a Ray head on the first node and a
#                     worker on every other node (`srun --nodes=1 --ntasks=1 -w NODE` under Slurm), waits
#                     until the cluster reports every node, runs CMD on the head with
#                     trainer.nnodes=N trainer.n_gpus_per_node=G trainer.default_local_dir=RUN_DIR/checkpoints
#                     and the forwarded environment (++ray_kwargs.ray_init.runtime_env.env_vars.X=...)
#                     appended (a key already given in CMD is left as given), tears Ray down on exit, INT
#                     or TERM and exits with CMD's exit code.
#                     Outside Slurm: --local-nodes K starts K raylets on this machine (head + K-1 workers,
#                     custom resource local_node_<i> on each); --address A runs CMD against a running
#                     cluster (nothing is started or stopped).
#   head              Start a Ray head on this machine (in the background; --foreground to block).
#   worker            Start a Ray worker on this machine joining --address (default: the address the
#                     last `head` of this RUN_DIR wrote).
#   wait              Wait until --address reports --nodes alive nodes (or --timeout, then name the
#                     missing ones and fail).
#   stop              Stop the Ray processes that head/worker/launch started for this RUN_DIR (by pid,
#                     then any process that still carries this run's marker variable). Never `ray stop`.
#   nodes             Print the node list this script would use (count=N, then node[i]=NAME lines).
#
# Options (environment equivalents in brackets)
#   --dry-run [DRY_RUN=1]            print every command instead of running it (nothing is created)
#   --run-dir DIR [RUN_DIR]          default: runs/<SLURM_JOB_ID> under Slurm, runs/<timestamp> for
#                                    launch, runs/local for head/worker/wait/stop (under the checkout)
#   --address HOST:PORT [SOFT_SPATIAL_RAY_ADDRESS]
#   --port P [SOFT_SPATIAL_RAY_PORT=6379]           head GCS port
#   --dashboard-port P [SOFT_SPATIAL_DASHBOARD_PORT=8265]
#   --client-port P [SOFT_SPATIAL_RAY_CLIENT_PORT=10001]
#                                    (outside Slurm, a default port taken on this machine becomes a free one;
#                                    `head` prints the address and keeps it in RUN_DIR/ray/address)
#   --agent-port P [SOFT_SPATIAL_AGENT_PORT]        dashboard-agent HTTP port. Ray's default, 52365, is
#                                    fixed, so outside Slurm a worker takes a free port (a second raylet on
#                                    one machine) and so does a head when 52365 is taken
#   --no-dashboard [SOFT_SPATIAL_RAY_DASHBOARD=0]
#   --num-cpus N [SOFT_SPATIAL_NUM_CPUS]     default SLURM_CPUS_PER_TASK, SLURM_CPUS_ON_NODE, nproc
#   --num-gpus N [SOFT_SPATIAL_NUM_GPUS]     default SLURM_GPUS_PER_NODE, SLURM_GPUS_ON_NODE,
#                                    CUDA_VISIBLE_DEVICES, nvidia-smi -L, 0
#   --trainer-gpus-per-node N [SOFT_SPATIAL_TRAINER_GPUS_PER_NODE]  default: --num-gpus
#   --resources JSON [SOFT_SPATIAL_RAY_RESOURCES]   extra custom resources for `ray start`
#   --object-store-memory BYTES [SOFT_SPATIAL_OBJECT_STORE_MEMORY]
#   --temp-dir DIR [SOFT_SPATIAL_RAY_TMPDIR]        Ray's --temp-dir (keep it short: socket paths)
#   --node-ip IP [SOFT_SPATIAL_NODE_IP]             --node-ip-address for head/worker
#   --head-ip IP [SOFT_SPATIAL_HEAD_IP]             skip head IP resolution (launch)
#   --nodes N                                       wait/launch --address: number of nodes to wait for
#   --local-nodes K [SOFT_SPATIAL_LOCAL_NODES=1]    launch outside Slurm: raylets on this machine
#   --timeout S [SOFT_SPATIAL_WAIT_TIMEOUT=300]     how long to wait for the nodes
#   --name NAME                                     head/worker/stop: process name (pid/log file)
#   --foreground                                    head/worker: exec `ray start --block` (for srun)
#   --no-trainer-args                               launch: append no Hydra overrides (non-Hydra CMD)
# Other environment
#   SOFT_SPATIAL_NODELIST="n1 n2"  node list override (else `scontrol show hostnames $SLURM_JOB_NODELIST`)
#   SOFT_SPATIAL_HEAD_NODE         head node (default: the first node)
#   SOFT_SPATIAL_FORWARD_ENV       extra variable names to forward (space or comma separated); always
#                                  forwarded when set: VERL_USE_EXTERNAL_MODULES SGLANG_PLUGINS
#                                  SGLANG_EXTERNAL_MODEL_PACKAGE VERL_PLATFORM HF_HUB_OFFLINE PYTHONPATH
#   SOFT_SPATIAL_SRUN_ARGS         extra srun arguments for the Ray steps (e.g. "--gres=gpu:4")
#   SOFT_SPATIAL_PYTHON, SOFT_SPATIAL_RAY_BIN   interpreter / ray CLI (default: those on PATH)
#   RAY_AUTH_MODE                  unset: token authentication with a fresh token in RUN_DIR/ray/auth_token
#                                  (RUN_DIR must be on a filesystem every node sees); `disabled` opts out;
#                                  RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH, when set, are used as they are.
set -euo pipefail

PROG="ray_cluster.sh"
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="${SOFT_SPATIAL_ROOT:-$(cd "$SCRIPT_DIR/.." && pwd)}"
# Variables every Ray process needs (plugin registration, platform, offline hub, import path).
BUILTIN_FORWARD_ENV=(VERL_USE_EXTERNAL_MODULES SGLANG_PLUGINS SGLANG_EXTERNAL_MODEL_PACKAGE VERL_PLATFORM
  HF_HUB_OFFLINE PYTHONPATH)
DEFAULT_AGENT_PORT=52365

log() { printf '[%s %s] %s\n' "$PROG" "$(date +%H:%M:%S)" "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}
usage() {
  sed -n '2,/^set -euo pipefail/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
}

# --- options -------------------------------------------------------------------------------------------
DRY_RUN="${DRY_RUN:-0}"
RUN_DIR="${RUN_DIR:-}"
ADDRESS="${SOFT_SPATIAL_RAY_ADDRESS:-}"
RAY_PORT="${SOFT_SPATIAL_RAY_PORT:-}"
DASHBOARD_PORT="${SOFT_SPATIAL_DASHBOARD_PORT:-}"
CLIENT_PORT="${SOFT_SPATIAL_RAY_CLIENT_PORT:-}"
AGENT_PORT="${SOFT_SPATIAL_AGENT_PORT:-}"
INCLUDE_DASHBOARD="${SOFT_SPATIAL_RAY_DASHBOARD:-1}"
NUM_CPUS="${SOFT_SPATIAL_NUM_CPUS:-}"
NUM_GPUS="${SOFT_SPATIAL_NUM_GPUS:-}"
TRAINER_GPUS="${SOFT_SPATIAL_TRAINER_GPUS_PER_NODE:-}"
RESOURCES="${SOFT_SPATIAL_RAY_RESOURCES:-}"
OBJECT_STORE="${SOFT_SPATIAL_OBJECT_STORE_MEMORY:-}"
TEMP_DIR="${SOFT_SPATIAL_RAY_TMPDIR:-}"
NODE_IP="${SOFT_SPATIAL_NODE_IP:-}"
HEAD_IP="${SOFT_SPATIAL_HEAD_IP:-}"
LOCAL_NODES="${SOFT_SPATIAL_LOCAL_NODES:-1}"
WAIT_TIMEOUT="${SOFT_SPATIAL_WAIT_TIMEOUT:-300}"
WAIT_NODES=""
NAME=""
FOREGROUND=0
TRAINER_ARGS=1
SUBCOMMAND=""
CMD=()

need_value() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value"; }
parse_args() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --) shift; CMD=("$@"); return ;;
      -h|--help) usage; exit 0 ;;
      --dry-run) DRY_RUN=1 ;;
      --foreground) FOREGROUND=1 ;;
      --no-dashboard) INCLUDE_DASHBOARD=0 ;;
      --no-trainer-args) TRAINER_ARGS=0 ;;
      --run-dir|--address|--port|--dashboard-port|--client-port|--agent-port|--num-cpus|--num-gpus|\
      --trainer-gpus-per-node|--resources|--object-store-memory|--temp-dir|--node-ip|--head-ip|--nodes|\
      --local-nodes|--timeout|--name)
        need_value "$@"
        case "$1" in
          --run-dir) RUN_DIR="$2" ;;
          --address) ADDRESS="$2" ;;
          --port) RAY_PORT="$2" ;;
          --dashboard-port) DASHBOARD_PORT="$2" ;;
          --client-port) CLIENT_PORT="$2" ;;
          --agent-port) AGENT_PORT="$2" ;;
          --num-cpus) NUM_CPUS="$2" ;;
          --num-gpus) NUM_GPUS="$2" ;;
          --trainer-gpus-per-node) TRAINER_GPUS="$2" ;;
          --resources) RESOURCES="$2" ;;
          --object-store-memory) OBJECT_STORE="$2" ;;
          --temp-dir) TEMP_DIR="$2" ;;
          --node-ip) NODE_IP="$2" ;;
          --head-ip) HEAD_IP="$2" ;;
          --nodes) WAIT_NODES="$2" ;;
          --local-nodes) LOCAL_NODES="$2" ;;
          --timeout) WAIT_TIMEOUT="$2" ;;
          --name) NAME="$2" ;;
        esac
        shift ;;
      head|worker|wait|stop|launch|nodes)
        [[ -z "$SUBCOMMAND" ]] || die "two subcommands: $SUBCOMMAND and $1"
        SUBCOMMAND="$1" ;;
      *) die "unknown argument '$1' (see --help)" ;;
    esac
    shift
  done
}

is_dry() { [[ "$DRY_RUN" == 1 || "$DRY_RUN" == true ]]; }
in_slurm() { [[ -n "${SLURM_JOB_ID:-}" ]]; }
is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }

# Print a command the way a shell would read it back.
shell_join() {
  local out="" a
  for a in "$@"; do out+="$(printf '%q' "$a") "; done
  printf '%s' "${out% }"
}
# run CMD...: run it, or print it under --dry-run.
run() {
  if is_dry; then printf '[dry-run] %s\n' "$(shell_join "$@")"; else "$@"; fi
}

# --- node list and resources ------------------------------------------------------------------------
NODES=()
# Fill NODES (a real array, one element per node) from SOFT_SPATIAL_NODELIST, Slurm, or this host.
resolve_nodes() {
  NODES=()
  local list
  if [[ -n "${SOFT_SPATIAL_NODELIST:-}" ]]; then
    list="${SOFT_SPATIAL_NODELIST//,/ }"
  elif [[ -n "${SLURM_JOB_NODELIST:-}" ]]; then
    command -v scontrol >/dev/null 2>&1 ||
      die "SLURM_JOB_NODELIST is set but scontrol is not on PATH (set SOFT_SPATIAL_NODELIST=\"n1 n2\")"
    list="$(scontrol show hostnames "$SLURM_JOB_NODELIST")" || die "scontrol show hostnames failed"
  else
    list="$(hostname -s 2>/dev/null || hostname)"
  fi
  local -a parts
  read -r -d '' -a parts <<<"$list" || true
  NODES=("${parts[@]}")
  [[ ${#NODES[@]} -gt 0 ]] || die "empty node list"
  if [[ -n "${SLURM_NNODES:-}" && -z "${SOFT_SPATIAL_NODELIST:-}" && ${#NODES[@]} -ne "$SLURM_NNODES" ]]; then
    die "node list has ${#NODES[@]} entries but SLURM_NNODES=$SLURM_NNODES: ${NODES[*]}"
  fi
}

# Sum of the counts in a Slurm GPU spec: "4", "h100:4", "gpu:h100:4", "a100:2,h100:2".
gpu_count_from_spec() {
  local spec="$1" total=0 item n
  local -a items
  IFS=',' read -r -a items <<<"$spec"
  for item in "${items[@]}"; do
    n="${item##*:}"
    n="${n%%(*}"
    is_uint "$n" || return 1
    total=$((total + n))
  done
  echo "$total"
}

resolve_cpus() {
  if [[ -z "$NUM_CPUS" ]]; then
    NUM_CPUS="${SLURM_CPUS_PER_TASK:-${SLURM_CPUS_ON_NODE:-}}"
    [[ -n "$NUM_CPUS" ]] || NUM_CPUS="$(nproc 2>/dev/null || echo 1)"
  fi
  is_uint "$NUM_CPUS" || die "--num-cpus must be an integer, got '$NUM_CPUS'"
}

resolve_gpus() {
  if [[ -z "$NUM_GPUS" ]]; then
    local spec
    for spec in "${SLURM_GPUS_PER_NODE:-}" "${SLURM_GPUS_ON_NODE:-}"; do
      if [[ -n "$spec" ]] && NUM_GPUS="$(gpu_count_from_spec "$spec")"; then break; fi
      NUM_GPUS=""
    done
  fi
  if [[ -z "$NUM_GPUS" && -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then
    local -a devs
    IFS=',' read -r -a devs <<<"$CUDA_VISIBLE_DEVICES"
    NUM_GPUS="${#devs[@]}"
  fi
  if [[ -z "$NUM_GPUS" ]] && ! is_dry && command -v nvidia-smi >/dev/null 2>&1; then
    NUM_GPUS="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
  fi
  NUM_GPUS="${NUM_GPUS:-0}"
  is_uint "$NUM_GPUS" || die "--num-gpus must be an integer, got '$NUM_GPUS'"
  TRAINER_GPUS="${TRAINER_GPUS:-$NUM_GPUS}"
  is_uint "$TRAINER_GPUS" || die "--trainer-gpus-per-node must be an integer, got '$TRAINER_GPUS'"
}

# merge_resources JSON '"key": 1' -> JSON object with the extra entry.
merge_resources() {
  local base="$1" extra="$2"
  if [[ -z "$extra" ]]; then
    echo "$base"
  elif [[ -z "$base" || "$base" =~ ^[[:space:]]*\{[[:space:]]*\}[[:space:]]*$ ]]; then
    echo "{$extra}"
  else
    echo "${base%\}*}, $extra}"
  fi
}

# --- run directory, environment, auth ---------------------------------------------------------------
resolve_run_dir() {
  if [[ -z "$RUN_DIR" ]]; then
    if in_slurm; then
      RUN_DIR="$ROOT/runs/$SLURM_JOB_ID"
    elif [[ "$SUBCOMMAND" == launch ]]; then
      RUN_DIR="$ROOT/runs/$(date +%Y%m%d-%H%M%S)"
    else
      RUN_DIR="$ROOT/runs/local"
    fi
  fi
  [[ "$RUN_DIR" == /* ]] || RUN_DIR="$PWD/$RUN_DIR"
  STATE_DIR="$RUN_DIR/ray"
  LOG_DIR="$RUN_DIR/logs"
  # Every Ray process this script starts carries this variable, so `stop` finds stragglers by it.
  MARKER="SOFT_SPATIAL_RAY_RUN=$RUN_DIR"
}

FORWARD_NAMES=()
resolve_forward_env() {
  FORWARD_NAMES=()
  local -a extra
  local names="${SOFT_SPATIAL_FORWARD_ENV:-}"
  read -r -a extra <<<"${names//,/ }" || true
  local name seen=" "
  for name in "${BUILTIN_FORWARD_ENV[@]}" "${extra[@]}"; do
    [[ "$name" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "SOFT_SPATIAL_FORWARD_ENV: bad variable name '$name'"
    [[ "$seen" == *" $name "* ]] && continue
    seen+="$name "
    if [[ -n "${!name:-}" ]]; then
      FORWARD_NAMES+=("$name")
      export "${name?}"
    fi
  done
}

# Ray token authentication (Ray 2.60 turns it on by default for local clusters; made explicit here so
# that every node and the driver agree). setup_auth create|join: `create` writes a fresh token for a
# cluster this script starts; `join` uses this RUN_DIR's token when there is one and otherwise leaves
# Ray's own defaults (~/.ray/auth_token, RAY_AUTH_TOKEN*) alone.
setup_auth() {
  local how="$1"
  if [[ -n "${RAY_AUTH_MODE:-}" && "${RAY_AUTH_MODE,,}" != token ]]; then
    return
  fi
  if [[ -n "${RAY_AUTH_TOKEN:-}" || -n "${RAY_AUTH_TOKEN_PATH:-}" ]]; then
    export RAY_AUTH_MODE=token
    return
  fi
  local token="$STATE_DIR/auth_token"
  if [[ "$how" == join ]]; then
    [[ -s "$token" ]] || return 0
  elif ! is_dry && [[ ! -s "$token" ]]; then
    (umask 077 && od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$token")
  fi
  export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$token"
}

# The `env K=V ...` prefix for every `ray start`.
ray_env_prefix() {
  local -a envs=(env "$MARKER")
  local name
  for name in "${FORWARD_NAMES[@]}"; do envs+=("$name=${!name}"); done
  for name in RAY_AUTH_MODE RAY_AUTH_TOKEN_PATH; do
    [[ -n "${!name:-}" ]] && envs+=("$name=${!name}")
  done
  printf '%s\n' "${envs[@]}"
}

resolve_tools() {
  PYTHON="${SOFT_SPATIAL_PYTHON:-}"
  if [[ -z "$PYTHON" ]]; then PYTHON="$(command -v python || command -v python3 || echo python3)"; fi
  RAY_BIN="${SOFT_SPATIAL_RAY_BIN:-}"
  if [[ -z "$RAY_BIN" ]]; then
    if [[ -x "$(dirname "$PYTHON")/ray" ]]; then RAY_BIN="$(dirname "$PYTHON")/ray"
    else RAY_BIN="$(command -v ray || echo ray)"; fi
  fi
}

# free_port PREFERRED: PREFERRED when it can be bound on this machine, else a free port.
free_port() {
  "$PYTHON" - "$1" <<'PY'
import socket, sys
def try_bind(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: TIME_WAIT is no conflict
    try:
        s.bind(("", port))
        return s.getsockname()[1]
    except OSError:
        return None
    finally:
        s.close()
print(try_bind(int(sys.argv[1])) or try_bind(0))
PY
}

# --- ray start command lines ------------------------------------------------------------------------
RAY_START=()
# build_ray_start head|worker RESOURCES: fills RAY_START with `env ... ray start ... --block`.
build_ray_start() {
  local role="$1" resources="$2"
  mapfile -t RAY_START < <(ray_env_prefix)
  RAY_START+=("$RAY_BIN" start --block --disable-usage-stats "--num-cpus=$NUM_CPUS" "--num-gpus=$NUM_GPUS")
  if [[ "$role" == head ]]; then
    RAY_START+=(--head "--port=$RAY_PORT" "--ray-client-server-port=$CLIENT_PORT")
    if [[ "$INCLUDE_DASHBOARD" == 1 ]]; then
      RAY_START+=(--include-dashboard=true "--dashboard-port=$DASHBOARD_PORT")
    else
      RAY_START+=(--include-dashboard=false)
    fi
    [[ -n "$HEAD_IP" ]] && RAY_START+=("--node-ip-address=$HEAD_IP")
  else
    RAY_START+=("--address=$ADDRESS")
    [[ -n "$NODE_IP" ]] && RAY_START+=("--node-ip-address=$NODE_IP")
  fi
  [[ -n "$AGENT_PORT" ]] && RAY_START+=("--dashboard-agent-listen-port=$AGENT_PORT")
  [[ -n "$resources" ]] && RAY_START+=("--resources=$resources")
  [[ -n "$OBJECT_STORE" ]] && RAY_START+=("--object-store-memory=$OBJECT_STORE")
  [[ -n "$TEMP_DIR" ]] && RAY_START+=("--temp-dir=$TEMP_DIR")
  return 0
}

# default_port DEFAULT: DEFAULT, or outside Slurm (real runs) a free port when DEFAULT is taken here.
default_port() {
  if in_slurm || is_dry; then echo "$1"; else free_port "$1"; fi
}

# Port defaults for a head or a worker on this machine.
resolve_ports() {
  local role="$1"
  if [[ "$role" == head ]]; then
    RAY_PORT="${RAY_PORT:-$(default_port 6379)}"
    CLIENT_PORT="${CLIENT_PORT:-$(default_port 10001)}"
    DASHBOARD_PORT="${DASHBOARD_PORT:-$(default_port 8265)}"
  fi
  # The dashboard agent's HTTP port is fixed (52365) in Ray, so a second raylet on one machine needs
  # another one: outside Slurm a worker always takes a free port, a head only when 52365 is taken.
  if [[ -z "$AGENT_PORT" ]] && ! in_slurm && ! is_dry; then
    if [[ "$role" == head ]]; then
      AGENT_PORT="$(free_port "$DEFAULT_AGENT_PORT")"
    else
      AGENT_PORT="$(free_port 0)"
    fi
    [[ "$AGENT_PORT" != "$DEFAULT_AGENT_PORT" ]] || AGENT_PORT=""
  fi
  return 0
}

# --- process bookkeeping ------------------------------------------------------------------------------
STARTED_PIDS=()
STARTED_NAMES=()
# start_bg NAME LOG CMD...: start CMD in the background (own session), record its pid.
start_bg() {
  local name="$1" logf="$2"
  shift 2
  if is_dry; then
    printf '[dry-run] %s > %s 2>&1 &\n' "$(shell_join "$@")" "$(printf '%q' "$logf")"
    STARTED_PIDS+=(0)
    STARTED_NAMES+=("$name")
    return
  fi
  (exec setsid "$@" >"$logf" 2>&1 </dev/null) &
  local pid=$!
  echo "$pid" >"$STATE_DIR/$name.pid"
  STARTED_PIDS+=("$pid")
  STARTED_NAMES+=("$name")
  log "started $name (pid $pid), log $logf"
}

pid_alive() {
  local state
  [[ -r "/proc/$1/stat" ]] || return 1
  state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
  [[ -n "$state" && "$state" != Z ]]
}

# wait_started NAME PID LOG: wait for "Ray runtime started" in LOG; fail if PID dies or on timeout.
wait_started() {
  local name="$1" pid="$2" logf="$3" deadline=$((SECONDS + WAIT_TIMEOUT))
  if is_dry; then
    printf '[dry-run] # wait for "Ray runtime started" in %s (timeout %ss)\n' "$logf" "$WAIT_TIMEOUT"
    return
  fi
  until grep -q "Ray runtime started" "$logf" 2>/dev/null; do
    if ! pid_alive "$pid"; then
      tail -n 30 "$logf" >&2 || true
      die "$name exited before Ray started (log: $logf)"
    fi
    ((SECONDS < deadline)) || die "$name: Ray did not start within ${WAIT_TIMEOUT}s (log: $logf)"
    sleep 1
  done
  log "$name is up"
}

# head_ip_from_log LOG: the IP in the "ray start --address='IP:PORT'" hint a Ray head prints.
head_ip_from_log() {
  local addr
  addr="$(sed -n "s/.*ray start --address='\([^']*\)'.*/\1/p" "$1" | head -n 1)"
  [[ -n "$addr" ]] || die "cannot find the head's address in $1 (set --head-ip)"
  echo "${addr%:*}"
}

# kill_pids_gracefully PID...: TERM, wait up to 30 s, then KILL.
kill_pids_gracefully() {
  local pid live=() deadline=$((SECONDS + 30))
  for pid in "$@"; do
    if pid_alive "$pid"; then kill -TERM "$pid" 2>/dev/null || true; live+=("$pid"); fi
  done
  while [[ ${#live[@]} -gt 0 ]]; do
    local still=()
    for pid in "${live[@]}"; do pid_alive "$pid" && still+=("$pid"); done
    live=("${still[@]}")
    [[ ${#live[@]} -eq 0 ]] && break
    if ((SECONDS >= deadline)); then
      log "killing (KILL) ${live[*]}"
      kill -KILL "${live[@]}" 2>/dev/null || true
      break
    fi
    sleep 0.5
  done
  # Reap our own children so they do not linger as zombies.
  for pid in "$@"; do wait "$pid" 2>/dev/null || true; done
}

# Processes on this machine that carry this run's marker (Ray processes started for RUN_DIR).
marker_pids() {
  local f pid
  while IFS= read -r f; do
    pid="${f#/proc/}"
    pid="${pid%/environ}"
    [[ "$pid" != "$$" && "$pid" != "${BASHPID:-}" ]] && pid_alive "$pid" && echo "$pid"
  done < <(grep -lzFx -- "$MARKER" /proc/[0-9]*/environ 2>/dev/null || true)
}

# Stop everything started for this RUN_DIR: pids we know (reverse start order), then marker stragglers.
teardown() {
  local i pid
  if is_dry; then
    for ((i = ${#STARTED_NAMES[@]} - 1; i >= 0; i--)); do
      printf '[dry-run] # on exit: kill -TERM <pid of %s>\n' "${STARTED_NAMES[i]}"
    done
    return
  fi
  for ((i = ${#STARTED_PIDS[@]} - 1; i >= 0; i--)); do
    pid="${STARTED_PIDS[i]}"
    if pid_alive "$pid"; then
      log "stopping ${STARTED_NAMES[i]} (pid $pid)"
      kill_pids_gracefully "$pid"
    fi
    rm -f "$STATE_DIR/${STARTED_NAMES[i]}.pid"
  done
  local -a left
  mapfile -t left < <(marker_pids)
  if [[ ${#left[@]} -gt 0 ]]; then
    log "stopping ${#left[@]} leftover Ray process(es) of this run: ${left[*]}"
    kill_pids_gracefully "${left[@]}"
  fi
  rm -f "$STATE_DIR/address"
}

# --- waiting for nodes --------------------------------------------------------------------------------
read -r -d '' WAIT_PY <<'PY' || true
import logging, os, socket, sys, time

addr, want, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
expected = sys.argv[4].split() if len(sys.argv) > 4 else []
watch = [w.split(":", 1) for w in os.environ.get("SS_WATCH", "").split()]
deadline = time.monotonic() + timeout
host, port = addr.rsplit(":", 1)


def check_watch():
    for pid, name in watch:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    continue
        except OSError:
            pass
        sys.exit(f"{name} (pid {pid}) exited while waiting for the cluster; see its log")


while True:
    check_watch()
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit(f"no Ray GCS at {addr} after {timeout:.0f}s")
        time.sleep(1)

import ray  # noqa: E402

ray.init(address=addr, logging_level=logging.ERROR, log_to_driver=False)
last = -1
while True:
    alive = [n for n in ray.nodes() if n.get("Alive")]
    if len(alive) >= want:
        print(f"{len(alive)}/{want} Ray nodes alive at {addr}", flush=True)
        break
    if len(alive) != last:
        print(f"{len(alive)}/{want} Ray nodes alive at {addr}, waiting", flush=True)
        last = len(alive)
    if time.monotonic() > deadline:
        hosts = [(n.get("NodeManagerHostname") or "", n.get("NodeManagerAddress")) for n in alive]
        alive_short = {h.split(".")[0] for h, _ in hosts}
        missing = [h for h in expected if h.split(".")[0] not in alive_short]
        msg = f"timed out after {timeout:.0f}s: {len(alive)}/{want} Ray nodes alive at {addr}"
        msg += f"; alive: {sorted(f'{h} ({ip})' for h, ip in hosts) or None}"
        if missing:
            msg += f"; missing nodes: {' '.join(missing)}"
        ray.shutdown()
        sys.exit(msg)
    check_watch()
    time.sleep(1)
ray.shutdown()
PY

# wait_nodes ADDRESS N [EXPECTED_NODES...]: wait for N alive nodes, watching the pids we started.
wait_nodes() {
  local addr="$1" want="$2"
  shift 2
  if is_dry; then
    printf '[dry-run] # wait until %s reports %s alive Ray node(s) (timeout %ss): %s\n' \
      "$addr" "$want" "$WAIT_TIMEOUT" "$*"
    return
  fi
  local watch="" i
  for ((i = 0; i < ${#STARTED_PIDS[@]}; i++)); do watch+="${STARTED_PIDS[i]}:${STARTED_NAMES[i]} "; done
  SS_WATCH="$watch" "$PYTHON" -c "$WAIT_PY" "$addr" "$want" "$WAIT_TIMEOUT" "$*" ||
    die "the Ray cluster at $addr did not come up (logs in $LOG_DIR)"
}

# --- Hydra overrides ----------------------------------------------------------------------------------
# hydra_quote V: V as a quoted Hydra override value, read back as the string V. In Hydra's quoted
# strings a backslash escapes only a quote or the backslashes before one (or before the closing quote);
# `${` is escaped so that OmegaConf does not take it for an interpolation.
hydra_quote() {
  local v="$1" out="" bs="" c i
  for ((i = 0; i < ${#v}; i++)); do
    c="${v:i:1}"
    if [[ "$c" == "\\" ]]; then
      bs+="\\"
      continue
    fi
    if [[ "$c" == "'" ]]; then
      out+="$bs$bs\\'"
    elif [[ "$c" == "\$" && "${v:i+1:1}" == "{" ]]; then
      out+="$bs\\\$"
    else
      out+="$bs$c"
    fi
    bs=""
  done
  printf "'%s'" "$out$bs$bs"
}

# hydra_value V: V as it is when it is a plain token Hydra reads as a string, else hydra_quote V.
hydra_value() {
  if [[ "$1" =~ ^[A-Za-z_./-][A-Za-z0-9_./-]*$ ]]; then printf '%s' "$1"; else hydra_quote "$1"; fi
}

# user_sets KEY: whether the command already overrides KEY (KEY=, +KEY=, ++KEY=, ~KEY).
user_sets() {
  local key="$1" a
  for a in "${CMD[@]}"; do
    [[ "$a" == "$key="* || "$a" == "+$key="* || "$a" == "++$key="* || "$a" == "~$key"* ]] && return 0
  done
  return 1
}

FINAL_CMD=()
build_final_cmd() {
  local nnodes="$1"
  FINAL_CMD=("${CMD[@]}")
  [[ "$TRAINER_ARGS" == 1 ]] || return 0
  local -a add=("trainer.nnodes=$nnodes" "trainer.n_gpus_per_node=$TRAINER_GPUS"
    "trainer.default_local_dir=$(hydra_value "$RUN_DIR/checkpoints")")
  local name ov key
  for name in "${FORWARD_NAMES[@]}"; do
    # Always quoted: Ray wants strings, and Hydra would read 1 or true as a number or a bool.
    add+=("++ray_kwargs.ray_init.runtime_env.env_vars.$name=$(hydra_quote "${!name}")")
  done
  for ov in "${add[@]}"; do
    key="${ov#++}"
    key="${key%%=*}"
    user_sets "$key" || FINAL_CMD+=("$ov")
  done
}

# --- subcommands --------------------------------------------------------------------------------------
this_host() { hostname -s 2>/dev/null || hostname; }

# prepare_common create|join: run directory, tools, forwarded environment, authentication.
prepare_common() {
  resolve_run_dir
  resolve_tools
  resolve_forward_env
  if ! is_dry; then
    mkdir -p "$STATE_DIR" "$LOG_DIR"
  fi
  setup_auth "$1"
}

cmd_nodes() {
  resolve_nodes
  echo "count=${#NODES[@]}"
  local i
  for ((i = 0; i < ${#NODES[@]}; i++)); do echo "node[$i]=${NODES[i]}"; done
}

# Start a head or worker on this machine (head/worker subcommands).
cmd_node() {
  local role="$1"
  if [[ "$role" == head ]]; then prepare_common create; else prepare_common join; fi
  resolve_cpus
  resolve_gpus
  if [[ "$role" == worker && -z "$ADDRESS" ]]; then
    [[ -s "$STATE_DIR/address" ]] || die "worker needs --address (or a head started with this RUN_DIR)"
    ADDRESS="$(<"$STATE_DIR/address")"
  fi
  resolve_ports "$role"
  build_ray_start "$role" "$RESOURCES"
  if [[ "$FOREGROUND" == 1 ]]; then
    is_dry && { run "${RAY_START[@]}"; return; }
    exec "${RAY_START[@]}"
  fi
  local host
  host="$(this_host)"
  if [[ -z "$NAME" ]]; then
    NAME="$role-$host"
    if [[ "$role" == worker ]]; then
      local i=1
      while [[ -e "$STATE_DIR/$role-$host-$i.pid" ]] && pid_alive "$(<"$STATE_DIR/$role-$host-$i.pid")"; do
        i=$((i + 1))
      done
      NAME="$role-$host-$i"
    fi
  fi
  if [[ -s "$STATE_DIR/$NAME.pid" ]] && pid_alive "$(<"$STATE_DIR/$NAME.pid")"; then
    die "$NAME is already running (pid $(<"$STATE_DIR/$NAME.pid")); use stop first"
  fi
  local logf="$LOG_DIR/ray-$NAME.log"
  start_bg "$NAME" "$logf" "${RAY_START[@]}"
  wait_started "$NAME" "${STARTED_PIDS[-1]}" "$logf"
  if [[ "$role" == head ]]; then
    local ip="$HEAD_IP"
    [[ -n "$ip" ]] || is_dry || ip="$(head_ip_from_log "$logf")"
    ADDRESS="${ip:-<head-ip>}:$RAY_PORT"
    is_dry || echo "$ADDRESS" >"$STATE_DIR/address"
  fi
  echo "RAY_ADDRESS=$ADDRESS"
  echo "RUN_DIR=$RUN_DIR"
}

cmd_wait() {
  resolve_run_dir
  resolve_tools
  setup_auth join
  [[ -n "$ADDRESS" || ! -s "$STATE_DIR/address" ]] || ADDRESS="$(<"$STATE_DIR/address")"
  [[ -n "$ADDRESS" ]] || die "wait needs --address"
  wait_nodes "$ADDRESS" "${WAIT_NODES:-1}"
}

cmd_stop() {
  resolve_run_dir
  local f name
  shopt -s nullglob
  for f in "$STATE_DIR"/*.pid; do
    name="$(basename "$f" .pid)"
    [[ -z "$NAME" || "$NAME" == "$name" ]] || continue
    STARTED_NAMES+=("$name")
    STARTED_PIDS+=("$(<"$f")")
  done
  shopt -u nullglob
  if [[ -n "$NAME" ]]; then
    # Only the named process: its Ray children go with it (ray start --block stops them on TERM).
    [[ ${#STARTED_PIDS[@]} -gt 0 ]] || die "no pid file for $NAME in $STATE_DIR"
    is_dry && { printf '[dry-run] kill -TERM %s\n' "${STARTED_PIDS[0]}"; return; }
    kill_pids_gracefully "${STARTED_PIDS[0]}"
    rm -f "$STATE_DIR/$NAME.pid"
    return
  fi
  teardown
  log "stopped Ray processes of $RUN_DIR"
}

# Resolve the head node's IP address as the other nodes will reach it.
resolve_head_ip() {
  local head="$1" ip=""
  [[ -n "$HEAD_IP" ]] && return
  if ! in_slurm; then
    # Ray's own choice of this machine's address; when that fails, the head's log tells it later.
    is_dry && return
    HEAD_IP="$("$PYTHON" -c 'from ray._private.services import get_node_ip_address as g; print(g())' \
      2>/dev/null)" || HEAD_IP=""
    return
  fi
  ip="$(getent ahostsv4 "$head" 2>/dev/null | awk 'NR==1 {print $1}')" || true
  if [[ -z "$ip" || "$ip" == 127.* ]] && ! is_dry && command -v srun >/dev/null 2>&1; then
    ip="$(srun --overlap --nodes=1 --ntasks=1 -w "$head" hostname --ip-address 2>/dev/null |
      awk '{print $1}')" || true
  fi
  if [[ -z "$ip" ]]; then
    is_dry || die "cannot resolve the IP of head node $head (set SOFT_SPATIAL_HEAD_IP)"
    ip="<ip-of-$head>"
  fi
  HEAD_IP="$ip"
}

DRIVER_PID=""
LAUNCH_CLEANED=0
launch_cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [[ "$LAUNCH_CLEANED" == 1 ]] && exit "$rc"
  LAUNCH_CLEANED=1
  if [[ -n "$DRIVER_PID" ]] && pid_alive "$DRIVER_PID"; then
    log "stopping the command (pid $DRIVER_PID)"
    kill_pids_gracefully "$DRIVER_PID"
  fi
  if [[ "${LAUNCH_OWNS_CLUSTER:-0}" == 1 ]]; then
    log "tearing down the Ray cluster"
    teardown
  fi
  log "exit code $rc; run directory $RUN_DIR"
  exit "$rc"
}

cmd_launch() {
  [[ ${#CMD[@]} -gt 0 ]] || die "launch needs a command after --"
  if [[ -n "$ADDRESS" ]]; then prepare_common join; else prepare_common create; fi
  resolve_cpus
  resolve_gpus
  if ! is_dry; then
    exec > >(tee -a "$LOG_DIR/launch.log") 2>&1
  fi
  local -a srun_extra=()
  read -r -a srun_extra <<<"${SOFT_SPATIAL_SRUN_ARGS:-}" || true
  local nnodes head mode
  LAUNCH_OWNS_CLUSTER=1
  if [[ -n "$ADDRESS" ]]; then
    mode=existing
    LAUNCH_OWNS_CLUSTER=0
    nnodes="${WAIT_NODES:-1}"
  elif in_slurm; then
    mode=slurm
    resolve_nodes
    nnodes=${#NODES[@]}
    head="${SOFT_SPATIAL_HEAD_NODE:-${NODES[0]}}"
  else
    mode=local
    if ! is_uint "$LOCAL_NODES" || ((LOCAL_NODES < 1)); then die "--local-nodes must be >= 1"; fi
    nnodes="$LOCAL_NODES"
    head="$(this_host)"
  fi
  log "mode=$mode nodes=$nnodes cpus/node=$NUM_CPUS gpus/node=$NUM_GPUS run_dir=$RUN_DIR"
  trap launch_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM

  if [[ "$mode" != existing ]]; then
    resolve_ports head
    resolve_head_ip "$head"
    local -a node_names
    if [[ "$mode" == slurm ]]; then
      node_names=("$head")
      local n
      for n in "${NODES[@]}"; do [[ "$n" == "$head" ]] || node_names+=("$n"); done
    else
      local i
      node_names=()
      for ((i = 0; i < nnodes; i++)); do node_names+=("local$i"); done
    fi
    ADDRESS="${HEAD_IP:-<head-ip>}:$RAY_PORT"
    local idx role node logf resources name
    for ((idx = 0; idx < nnodes; idx++)); do
      node="${node_names[idx]}"
      resources="$RESOURCES"
      if [[ "$mode" == local ]]; then
        resources="$(merge_resources "$RESOURCES" "\"local_node_$idx\": 1")"
        if ((idx > 0)); then
          AGENT_PORT=""
          resolve_ports worker
        fi
      fi
      role="worker"
      ((idx > 0)) || role="head"
      name="$role-$node"
      logf="$LOG_DIR/ray-$name.log"
      build_ray_start "$role" "$resources"
      if [[ "$mode" == slurm ]]; then
        local -a srun_cmd=(srun --nodes=1 --ntasks=1 -w "$node" --export=ALL)
        [[ -n "${SLURM_CPUS_PER_TASK:-}" ]] && srun_cmd+=("--cpus-per-task=$SLURM_CPUS_PER_TASK")
        start_bg "$name" "$logf" "${srun_cmd[@]}" "${srun_extra[@]}" "${RAY_START[@]}"
      else
        start_bg "$name" "$logf" "${RAY_START[@]}"
      fi
      if ((idx == 0)); then
        wait_started "$name" "${STARTED_PIDS[-1]}" "$logf"
        if [[ -z "$HEAD_IP" ]] && ! is_dry; then
          HEAD_IP="$(head_ip_from_log "$logf")"
          ADDRESS="$HEAD_IP:$RAY_PORT"
        fi
      fi
    done
    is_dry || echo "$ADDRESS" >"$STATE_DIR/address"
    if [[ "$mode" == slurm ]]; then
      wait_nodes "$ADDRESS" "$nnodes" "${node_names[@]}"
    else
      wait_nodes "$ADDRESS" "$nnodes"
    fi
  else
    wait_nodes "$ADDRESS" "$nnodes"
  fi

  export RAY_ADDRESS="$ADDRESS" RUN_DIR
  build_final_cmd "$nnodes"
  local -a driver=("${FINAL_CMD[@]}")
  if [[ "$mode" == slurm && "$(this_host)" != "${head%%.*}" ]]; then
    driver=(srun --overlap --nodes=1 --ntasks=1 -w "$head" --export=ALL "${driver[@]}")
  fi
  if is_dry; then
    printf '[dry-run] %s\n' "$(shell_join env "RAY_ADDRESS=$RAY_ADDRESS" "${driver[@]}")"
    teardown
    trap - EXIT INT TERM
    return 0
  fi
  {
    echo "date=$(date -Is)"
    echo "mode=$mode nnodes=$nnodes gpus_per_node=$TRAINER_GPUS cpus_per_node=$NUM_CPUS"
    echo "ray_address=$RAY_ADDRESS"
    echo "command=$(shell_join "${driver[@]}")"
  } >"$RUN_DIR/launch.txt"
  log "running: $(shell_join "${driver[@]}")"
  "${driver[@]}" &
  DRIVER_PID=$!
  local rc=0
  wait "$DRIVER_PID" || rc=$?
  DRIVER_PID=""
  log "command exited with $rc"
  exit "$rc"
}

main() {
  parse_args "$@"
  case "$SUBCOMMAND" in
    head) cmd_node head ;;
    worker) cmd_node worker ;;
    wait) cmd_wait ;;
    stop) cmd_stop ;;
    launch) cmd_launch ;;
    nodes) cmd_nodes ;;
    "") usage >&2; exit 2 ;;
  esac
}

main "$@"
