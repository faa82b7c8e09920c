#!/usr/bin/env bash
# The Slurm path for real (docs/slurm.md): a one-node Slurm cluster on localhost runs the documented batch
# script, scripts/slurm/dlbench.sbatch, with the smoke scenario (sbatch -> srun -> torchrun -> c10d rendezvous
# -> 2 gloo ranks on CPU), then a run cancelled mid-run with scancel, then its --resume.
#
#   bash scripts/slurm_check.sh        # root, or slurm-wlm and munge already installed
#
# Installs slurm-wlm and munge with apt-get when missing (root only; whatever system services the packages
# set up are left as apt leaves them: this script starts its own daemons). Everything else lives in a fresh temp
# directory: a munge key and socket of its own, a generated slurm.conf (free ports, no cgroups: a container
# has none to give), state, logs, data and results; so it runs beside another cluster and twice in a row.
# It stops only the daemons it started, on any exit. One line per step at the end; exit 0 only when every
# step passed. The temp directory is removed after a pass (SLURM_CHECK_KEEP=1 keeps it) and kept, its path
# printed, after a failure.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
SBATCH_FILE=scripts/slurm/dlbench.sbatch
JOB_TIMEOUT=${SLURM_CHECK_JOB_TIMEOUT:-90}   # seconds one job may take (11-40 s measured on 2 busy cores)
PYTHON=${PYTHON:-python}

WORK=$(mktemp -d /tmp/dlbench-slurm.XXXXXX)
export SLURM_CONF=$WORK/slurm.conf
PIDS=()              # the daemons this script started, stopped in reverse order
STEPS=()             # "PASS|FAIL|SKIP name: detail", printed at the end
FAILED=0
START=$SECONDS

say() { echo "slurm_check: $*" >&2; }
step() {  # step STATUS NAME DETAIL
    STEPS+=("$1 $2: $3")
    [ "$1" = PASS ] || FAILED=1
    say "$1 $2: $3"
}

cleanup() {
    local code=$?
    if [ "${#PIDS[@]}" -gt 0 ] && command -v scancel >/dev/null; then
        scancel --quiet --full --signal=KILL --partition=check 2>/dev/null  # no job outlives its cluster
        sleep 1
    fi
    local i name line left
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        kill "${PIDS[i]}" 2>/dev/null && wait "${PIDS[i]}" 2>/dev/null
    done
    local why="an earlier step failed"
    if [ "$code" -ne 0 ] && [ "$FAILED" -eq 0 ]; then  # a signal (Ctrl-C, SIGTERM) or an error between steps
        why="interrupted"
        step FAIL interrupted "exit $code before every step had run"
    fi
    for name in install preflight daemons run cancel resume; do  # the steps left out
        [[ " ${STEPS[*]} " == *" $name: "* ]] || STEPS+=("SKIP $name: not run ($why)")
    done
    if [ "${#PIDS[@]}" -gt 0 ]; then
        left=$(for i in "${PIDS[@]}"; do kill -0 "$i" 2>/dev/null && echo "$i"; done; pgrep -f "$WORK")
        if [ -z "$left" ]; then
            step PASS stop "the daemons it started (pids ${PIDS[*]}) stopped, no process of its jobs left"
        else
            step FAIL stop "still running: pids ${left//$'\n'/ }"
        fi
    fi
    STEPS+=("$([ "$FAILED" -eq 0 ] && echo PASS || echo FAIL) total: $((SECONDS - START)) s")
    echo "slurm_check summary:"
    for line in "${STEPS[@]}"; do echo "  $line"; done
    if [ "$FAILED" -eq 0 ] && [ "$code" -eq 0 ]; then
        [ -n "${SLURM_CHECK_KEEP:-}" ] || rm -rf "$WORK"
        echo "slurm_check: all steps passed${SLURM_CHECK_KEEP:+ (kept: $WORK)}"
    elif rmdir "$WORK" 2>/dev/null; then  # failed before it wrote anything
        echo "slurm_check: FAILED"
    else
        echo "slurm_check: FAILED (logs, config and results kept in $WORK)"
        [ "$code" -eq 0 ] && code=1
    fi
    exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

install() {
    local missing=()
    command -v munged >/dev/null || missing+=(munge)
    for tool in slurmctld slurmd sbatch; do command -v "$tool" >/dev/null || missing+=(slurm-wlm); done
    if [ "${#missing[@]}" -eq 0 ]; then
        step PASS install "$(slurmd -V), $(munged -V 2>&1 | head -n 1) already installed"
        return 0
    fi
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
        step FAIL install "slurm-wlm and munge are not installed and this is not root with apt-get: run as root, or install them (apt-get install slurm-wlm munge)"
        return 1
    fi
    local start=$SECONDS
    if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            slurm-wlm munge; } >"$WORK/apt.log" 2>&1; then
        tail -n 20 "$WORK/apt.log" >&2
        step FAIL install "apt-get install slurm-wlm munge failed (log: $WORK/apt.log)"
        return 1
    fi
    step PASS install "$(slurmd -V) and munge installed with apt-get in $((SECONDS - start)) s"
}

write_config() {
    local node cpus
    node=$(slurmd -C | head -n 1)  # NodeName=<host> CPUs=.. Boards=.. ... RealMemory=.. as slurmd sees them
    cpus=$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$node")
    NODE_CPUS=${cpus:-1}
    mkdir -p "$WORK/munge" "$WORK/state" "$WORK/spool"
    cat >"$SLURM_CONF" <<EOF
# generated by scripts/slurm_check.sh: one node, localhost, no cgroups
ClusterName=dlbenchcheck
SlurmctldHost=localhost
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$WORK/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
SlurmctldLogFile=$WORK/slurmctld.log
SlurmdLogFile=$WORK/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
KillWait=15
MinJobAge=3600
$(sed "s/^NodeName=[^ ]*/NodeName=localhost NodeAddr=127.0.0.1/" <<<"$node") Gres=gpu:4 State=UNKNOWN
PartitionName=check Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
    # Four stand-in GPUs, because the batch script asks for --gpus-per-node: slurmd wants a device file per
    # GPU (links to /dev/null). no_gpu_env: Slurm sets no CUDA_VISIBLE_DEVICES for them (it would say 0,1 and
    # so name a GPU host's real GPUs); submit() hides the GPUs instead: emulated accelerators on CPU, gloo.
    mkdir -p "$WORK/dev"
    local i
    for i in 0 1 2 3; do ln -sf /dev/null "$WORK/dev/gpu$i"; done
    echo "NodeName=localhost Name=gpu File=$WORK/dev/gpu[0-3] Flags=no_gpu_env" >"$WORK/gres.conf"
}

start_daemons() {
    dd if=/dev/urandom of="$WORK/munge/munge.key" bs=1024 count=1 status=none && chmod 600 "$WORK/munge/munge.key"
    munged --foreground --force --key-file="$WORK/munge/munge.key" --socket="$WORK/munge/munge.socket" \
        --pid-file="$WORK/munge/munged.pid" --log-file="$WORK/munge/munged.log" \
        --seed-file="$WORK/munge/munged.seed" >"$WORK/munged.out" 2>&1 &
    PIDS+=($!)
    slurmctld -D -i -f "$SLURM_CONF" >"$WORK/slurmctld.out" 2>&1 &
    PIDS+=($!)
    slurmd -D -N localhost -f "$SLURM_CONF" >"$WORK/slurmd.out" 2>&1 &
    PIDS+=($!)
    local waited=0 state=""
    while [ "$waited" -lt 30 ]; do
        state=$(sinfo -h -n localhost -o %t 2>/dev/null)
        case "$state" in idle) break ;; inval* | drain* | down*) break ;; esac
        sleep 1
        waited=$((waited + 1))
    done
    if [ "$state" != idle ]; then
        tail -n 5 "$WORK"/munge/munged.log "$WORK"/slurmctld.log "$WORK"/slurmd.log >&2 2>/dev/null
        step FAIL daemons "node localhost not idle after 30 s (state: ${state:-no answer}; logs in $WORK)"
        return 1
    fi
    step PASS daemons "munged, slurmctld, slurmd started (pids ${PIDS[*]}); node localhost idle after ${waited} s with $NODE_CPUS CPUs and 4 stand-in GPUs"
}

submit() {  # submit ARGS...: the documented batch script on one node, 2 GPUs' worth of ranks; prints the job id
    # (sbatch passes its environment to the job: the ranks see no GPU, on a GPU host too)
    CUDA_VISIBLE_DEVICES="" sbatch --parsable --nodes=1 --gpus-per-node=2 --cpus-per-task="$NODE_CPUS" --output="$WORK/job-%j.log" \
        "$SBATCH_FILE" "$@"
}

job_field() { scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p"; }

wait_job() {  # wait_job ID: until it has ended (not pending, running or completing); sets RESULT="STATE EXITCODE"
    # (in this shell, not in a $(...) subshell: a signal to the script then ends the wait within a second)
    local start=$SECONDS state
    while [ $((SECONDS - start)) -lt "$JOB_TIMEOUT" ]; do
        state=$(job_field "$1" JobState)
        case "$state" in
            PENDING | RUNNING | COMPLETING | CONFIGURING | SUSPENDED | "") sleep 1 ;;
            *) RESULT="$state $(job_field "$1" ExitCode)"; return 0 ;;
        esac
    done
    RESULT="TIMEOUT(check:${JOB_TIMEOUT}s) -"
    scancel --quiet "$1"
    return 1
}

run_dir_of() { ls -d "$1"/*/ 2>/dev/null | head -n 1 | sed 's:/$::'; }

check_run() {  # check_run RUN_DIR: every cell of the run has exactly one line, none failed, report.md is there
    "$PYTHON" - "$1" <<'PY'
import json, sys
from pathlib import Path
from harness.results import rundir
run = Path(sys.argv[1])
expected = json.loads((run / "env.json").read_text())["settings"]["cells"]
cells = rundir.read_results(run)
lines = len((run / "cells.jsonl").read_text().splitlines())
bad = [f"{c.cell}: {c.error}" for c in cells if c.error or not c.measured]
ranks = sorted({c.world_size for c in cells})
ok = sorted(c.cell for c in cells) == sorted(expected) and lines == len(expected) and not bad and ranks == [2]
print(f"{lines} lines in cells.jsonl for {len(expected)} cells, world size {ranks}, "
      f"report.md {'written' if (run / 'report.md').exists() else 'MISSING'}" + (f", failed: {bad}" if bad else ""))
sys.exit(0 if ok and (run / "report.md").exists() else 1)
PY
}

job_step() {  # job_step NAME OUT ARGS...: submit, wait, expect COMPLETED 0:0 and a complete run directory
    local name=$1 out=$2 id result run detail start=$SECONDS
    shift 2
    if ! id=$(submit "$@" 2>"$WORK/sbatch-$name.err"); then
        step FAIL "$name" "sbatch refused the job: $(tail -n 1 "$WORK/sbatch-$name.err")"
        return 1
    fi
    wait_job "$id"
    result=$RESULT
    run=$(run_dir_of "$out")
    if [ -z "$run" ]; then
        detail="no run directory under $out"
    elif ! detail=$(check_run "$run" 2>&1); then
        result="$result, run directory incomplete"
    fi
    if [ "$result" != "COMPLETED 0:0" ]; then
        tail -n 15 "$WORK/job-$id.log" >&2
        step FAIL "$name" "job $id ended $result; $(tail -n 1 <<<"$detail") (log: $WORK/job-$id.log)"
        return 1
    fi
    step PASS "$name" "job $id COMPLETED, exit 0, ran $(job_field "$id" RunTime) ($((SECONDS - start)) s from sbatch); $(basename "$run"): $detail"
}

cancel_step() {  # a longer smoke run (--steps 60), scancel once its first cell is in cells.jsonl
    local out=$WORK/results-cancelled id start=$SECONDS lines=0 cells=0 result run hint
    if ! id=$(submit --scenario smoke --steps 60 --data-dir "$WORK/data" --out "$out" 2>"$WORK/sbatch-cancel.err"); then
        step FAIL cancel "sbatch refused the job: $(tail -n 1 "$WORK/sbatch-cancel.err")"
        return 1
    fi
    while [ $((SECONDS - start)) -lt "$JOB_TIMEOUT" ]; do
        run=$(run_dir_of "$out")
        lines=$( [ -n "$run" ] && [ -f "$run/cells.jsonl" ] && wc -l <"$run/cells.jsonl" || echo 0)
        [ "$lines" -ge 1 ] && break
        [ "$(job_field "$id" JobState)" = RUNNING ] || [ "$(job_field "$id" JobState)" = PENDING ] || break
        sleep 0.5
    done
    scancel "$id"
    wait_job "$id"
    result=$RESULT
    lines=$( [ -n "$run" ] && [ -f "$run/cells.jsonl" ] && wc -l <"$run/cells.jsonl" || echo 0)
    cells=$( [ -n "$run" ] && "$PYTHON" -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["settings"]["cells"]))' \
        "$run/env.json" 2>/dev/null || echo 0)
    CANCELLED_RUN=$run
    hint=$(grep -c -- "terminated (SIGTERM).*run the rest with: .*--resume $run" "$WORK/job-$id.log")
    if [ "${result%% *}" != CANCELLED ] || [ "$lines" -lt 1 ] || [ "$lines" -ge "$cells" ] || [ ! -f "$run/report.md" ] \
            || [ "$hint" -ne 1 ]; then
        tail -n 60 "$WORK/job-$id.log" >&2  # a rank still unwinding after the guard's grace prints its threads
        step FAIL cancel "job $id ended ${result}; $lines of $cells cells in cells.jsonl (wanted at least 1 and not all: cancelled mid-run), report.md $([ -f "$run/report.md" ] && echo written || echo MISSING), $hint line(s) 'terminated (SIGTERM) ... --resume' in the log (log: $WORK/job-$id.log)"
        return 1
    fi
    step PASS cancel "job $id scancelled after its first cell: ${result} after $(job_field "$id" RunTime); $lines of $cells cells in cells.jsonl, report.md written over them, rank 0 logged 'terminated (SIGTERM) ... run the rest with: ... --resume $(basename "$run")'"
}

preflight() {  # what the batch script runs: torchrun on PATH, the harness importable from here
    if ! command -v torchrun >/dev/null || ! "$PYTHON" -c "import harness, torch" 2>/dev/null; then
        step FAIL preflight "torchrun is not on PATH or '$PYTHON -c \"import harness, torch\"' fails here: install the project first (python -m pip install -e .)"
        return 1
    fi
    step PASS preflight "$(command -v torchrun), torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"
}

main() {
    install || return 1
    preflight || return 1
    write_config
    start_daemons || return 1
    job_step run "$WORK/results" --scenario smoke --data-dir "$WORK/data" --out "$WORK/results" || return 1
    cancel_step || return 1
    job_step resume "$WORK/results-cancelled" --resume "$CANCELLED_RUN"
}

main
