#!/usr/bin/env bash
# The GPU check: on one GPU, from the source tree (PYTHONPATH=.), no network, no pip install into the
# machine's environment; each stage has a time limit and the limits add up to under 9 minutes (a limit, not
# a measured time). What each stage verifies and how to read the summary: docs/gpus.md.
#
#   bash scripts/gpu_check.sh [OUT]     run every stage; exit 0 only when every stage passed. OUT (or $OUT,
#                                       or a new temporary folder) receives two files and nothing else:
#                                       summary.txt and gpu-check.tar.gz (every log, JSON result, scenario
#                                       and run directory but the traces and plots, under gpu-check/); the
#                                       work folder they come from is a temporary folder outside OUT
#   bash scripts/gpu_check.sh --list    the stages and their timeouts (s), then their sum
#   GPU_CHECK_STAGES="events decode" bash scripts/gpu_check.sh [OUT]
#                                       only those stages (the preflight gates the others only when listed)
#   bash scripts/gpu_check.sh --dry-run [OUT]
#                                       on any machine (no GPU needed): write the scenario files and run each
#                                       run stage's exact run_bench.py command with --dry-run (an emulated
#                                       H200 in place of "auto"), checking the number of cells
#
# Stages, in order; each has its own timeout (coreutils timeout), writes gpu-check/<stage>.log, and a failed
# stage does not stop the next ones, except the preflight: when it fails every other stage is SKIP.
#   preflight  torch, torchvision, the libraries the stages import, CUDA, NVML, NVML UUIDs = torch's
#   events     CUDA-event time around launched work excludes a host sleep (scripts/gpu/events.py)
#   streams    a side-stream host-to-device copy overlaps a matrix product (scripts/gpu/streams.py)
#   decode     decode_jpeg on the GPU = the CPU decode: baseline, progressive, grayscale, odd sizes
#   memcheck   the memory probe's prediction within 15% of real steps' peaks (scripts/gpu/memcheck.py)
#   nvmlbusy   NVML utilisation above 0 while the GPU computes (scripts/gpu/nvmlbusy.py)
#   oom        run_bench.py oomcheck --real: 2 ranks over gloo, BOTH ON GPU 0 (NCCL refuses
#              two ranks on one GPU, so every multi-rank check on a one-GPU machine uses gloo on GPU 0)
#   matrix     the gpu scenario on storage mmap over precision x preprocess (6 cells)
#   extras     the same with batching fixed/dynamic x loader workers+side_stream/threads (4 cells)
#   profile    one cell with --profile: the profiler's kernel AU beside event AU (the gap reported, not
#              asserted; traces without memory profiling, exported after the window), AU vs NVML; its steps
#              sized from the matrix stage's step time for a PROFILE_WINDOW_S window (NVML needs 2 s)
#   torchrun   torchrun --standalone --nproc-per-node 1 on one cell (the harness joins torchrun's group);
#              bf16 where native (compute capability 8.0), amp below (the harness records bf16 as unsupported)
#   shared     2 ranks sharing GPU 0 over gloo (--share-gpu) on one cell: the multi-rank CUDA path (the
#              agreement, shadow steps) on a one-GPU machine; SKIP while run_bench.py has no --share-gpu
# Each run stage then checks its run directory (scripts/gpu/check_run.py): no error, a real GPU, peaks in
# (0, capacity], AU against NVML where the window is long enough (and the profiler's kernel time); its result
# is gpu-check/json/check_<stage>.json.
#
# Optional libraries (the GPU image lacks webdataset, lmdb, braceexpand, simplejpeg): no stage needs them (the
# run stages use storage mmap, and the decoder falls back to pil without simplejpeg); the preflight notes them.
# Wheels are used when carried, never required: set DLBENCH_WHEELS to a folder of their wheels, or carry
# .gpu-wheels/ (git-ignored: a plain copy of the tree has none; scripts/gpu/fetch_wheels.sh makes it where
# there is network); the preflight installs what does not import into a temporary folder put on PYTHONPATH.
set -uo pipefail
cd "$(dirname "$0")/.."

# The stage timeouts (s): the one place they are set. Their sum must stay under BUDGET_S (9 minutes: the
# device machine runs one command for at most 10), and tests/test_gpu_check_output.py checks it. A stage
# that times out gets 1 s more to die (--kill-after).
STAGES=(preflight events streams decode memcheck nvmlbusy oom matrix extras profile torchrun shared)
declare -A LIMIT=([preflight]=40 [events]=15 [streams]=15 [decode]=20 [memcheck]=35 [nvmlbusy]=15
                  [oom]=75 [matrix]=90 [extras]=65 [profile]=70 [torchrun]=40 [shared]=40)
BUDGET_S=540
# cells each run stage must write (checked in the run directory, and against --dry-run's listing)
declare -A CELLS=([matrix]=6 [extras]=4 [profile]=1 [torchrun]=1 [shared]=1)
declare -A RANKS=([shared]=2)  # rank records per cell (1 where not given)
# few samples and steps: the dataset (pixels, mmap) is made once in DATA and reused by every run stage
SAMPLES=512
WARMUP=3
declare -A STEPS=([matrix]=10 [extras]=10 [profile]=300 [torchrun]=20 [shared]=20)
# the profile stage's steps: enough for a PROFILE_WINDOW_S window at the matrix stage's fastest cell's median
# step, within PROFILE_STEPS_BETWEEN; STEPS[profile] where the matrix stage left no steps to time
PROFILE_WINDOW_S=6
PROFILE_STEPS_BETWEEN="100 1500"

total_s() { local t=0 s; for s in "${STAGES[@]}"; do t=$((t + LIMIT[$s])); done; echo "$t"; }

MODE=run
case "${1:-}" in
  --list) for s in "${STAGES[@]}"; do echo "$s ${LIMIT[$s]}"; done; echo "total $(total_s) (budget $BUDGET_S)"
          exit 0 ;;
  --dry-run) MODE=dry; shift ;;
  -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  -*) echo "scripts/gpu_check.sh: unknown option $1; use --list, --dry-run [OUT], --help or an OUT folder" >&2
      exit 2 ;;
esac
if [ "$(total_s)" -ge "$BUDGET_S" ]; then
  echo "scripts/gpu_check.sh: the stage timeouts add up to $(total_s) s, not under the budget of $BUDGET_S s" >&2
  exit 2
fi

OUT=${1:-${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/dlbench-gpu-check.XXXXXX")}}
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dlbench-gpu-work.XXXXXX")  # everything but the two files: not under OUT
RESULTS=$WORK/gpu-check  # logs, JSON results, scenarios, run directories: archived into OUT at the end
mkdir -p "$RESULTS/json" "$RESULTS/scenarios" "$RESULTS/runs"
DATA=${DATA_DIR:-$WORK/data}
PYDEPS=$WORK/pydeps
WHEELS=${DLBENCH_WHEELS:-$([ -d .gpu-wheels ] && echo "$PWD/.gpu-wheels")}
export PYTHONPATH="$PWD:$PYDEPS${PYTHONPATH:+:$PYTHONPATH}"
trap 'rm -rf "$WORK"' EXIT
export OUT RESULTS DATA PYDEPS WHEELS SAMPLES WARMUP MODE PROFILE_WINDOW_S PROFILE_STEPS_BETWEEN
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || PY=python
export PY

# --- what the stages run ------------------------------------------------------------------------------
install_missing() {  # module=distribution pairs that do not import are installed from $WHEELS into $PYDEPS
  local missing=() pair
  for pair in webdataset=webdataset lmdb=lmdb simplejpeg=simplejpeg; do
    "$PY" -c "import ${pair%%=*}" 2>/dev/null || missing+=("${pair#*=}")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [[ " ${missing[*]} " == *" webdataset "* ]] && missing+=(braceexpand)
  if [ -z "$WHEELS" ]; then
    echo "not importable: ${missing[*]} (optional: no stage needs them; no DLBENCH_WHEELS or .gpu-wheels/)"
    return 0  # the preflight notes them
  fi
  local dist
  for dist in "${missing[@]}"; do  # one at a time: a wheel the folder lacks leaves the others installed
    echo "installing $dist from $WHEELS into $PYDEPS"
    "$PY" -m pip install --quiet --no-index --no-deps --find-links "$WHEELS" --target "$PYDEPS" "$dist" \
      || echo "could not install $dist from $WHEELS (the preflight says what that stops)"
  done
}

scenario_files() {  # the run stages' scenarios; --dry-run: "auto" hardware replaced by one emulated H200
  local hw='s/^accelerator = "auto".*/accelerator = "H200"/; s/^count = "auto".*/count = 1/'
  if [ "$MODE" = dry ]; then sed "$hw" scenarios/gpu.toml > "$RESULTS/scenarios/gpu.toml"; fi
  { awk '/^\[matrix\]/ {exit} {print}' scenarios/gpu.toml
    cat <<'TOML'
[matrix]
storage = ["mmap"]
precision = ["amp"]
preprocess = ["host"]
batching = ["fixed", { name = "dynamic", max_batch = 128 }]
loader = [{ name = "workers", side_stream = true }, "threads"]
TOML
  } > "$RESULTS/scenarios/gpu-extras.toml"
  if [ "$MODE" = dry ]; then sed -i "$hw" "$RESULTS/scenarios/gpu-extras.toml"; fi
}

profile_steps() {  # the profile stage's steps, sized by time from the matrix stage's run (else STEPS[profile])
  local sized
  # shellcheck disable=SC2086 # two numbers
  if sized=$("$PY" scripts/gpu/check_run.py "$RESULTS/runs/matrix" --steps-for-window "$PROFILE_WINDOW_S" \
               --steps-between $PROFILE_STEPS_BETWEEN 2>/dev/null) && [ -n "$sized" ]; then
    echo "profile: $sized steps, a ${PROFILE_WINDOW_S} s window at the matrix stage's fastest median step" >&2
    echo "$sized"
  else
    echo "profile: ${STEPS[profile]} steps (the matrix stage left no measured step to size them from)" >&2
    echo "${STEPS[profile]}"
  fi
}

bench() {  # stage, scenario, run_bench arguments...: a run into gpu-check/runs/<stage>, then its checks
  local stage=$1 scenario=$2; shift 2
  [ "$MODE" = dry ] && [ "$scenario" = gpu ] && scenario=$RESULTS/scenarios/gpu.toml
  if [[ " $* " == *" --share-gpu "* ]] && ! "$PY" run_bench.py --help 2>/dev/null | grep -q -- --share-gpu; then
    echo "SKIP $stage: run_bench.py has no --share-gpu option yet"; return 77
  fi
  local steps=${STEPS[$stage]}
  if [ "$stage" = profile ]; then
    steps=$(profile_steps)
  fi
  local args=(--scenario "$scenario" --samples "$SAMPLES" --steps "$steps" --warmup-steps "$WARMUP"
              --data-dir "$DATA" --out "$RESULTS/runs/$stage" --quiet "$@")
  if [ "$MODE" = dry ]; then
    local listed
    listed=$("$PY" run_bench.py "${args[@]}" --device emulated --dry-run) || return 1
    echo "$listed"
    local n; n=$(grep -cE '^ +[0-9]+ +storage=' <<<"$listed")
    [ "$n" -eq "${CELLS[$stage]}" ] && echo "PASS $stage: $n cells listed" && return 0
    echo "FAIL $stage: $n cells listed, expected ${CELLS[$stage]}"; return 1
  fi
  local launcher=("$PY")
  if [ "$stage" = torchrun ]; then
    launcher=("$PY" -m torch.distributed.run --standalone --nproc-per-node 1)  # what `torchrun` runs
    command -v torchrun >/dev/null && launcher=(torchrun --standalone --nproc-per-node 1)
  fi
  echo "+ ${launcher[*]} run_bench.py ${args[*]} --device cuda"
  "${launcher[@]}" run_bench.py "${args[@]}" --device cuda
  local rc=$?
  local check=(--cells "${CELLS[$stage]}" --ranks "${RANKS[$stage]:-1}" --out "$RESULTS/json" --name "check_$stage")
  [ "$stage" = profile ] && check+=(--profile --warmup-steps "$WARMUP" --require-nvml)
  "$PY" scripts/gpu/check_run.py "$RESULTS/runs/$stage" "${check[@]}" && [ "$rc" -eq 0 ] && return 0
  [ "$rc" -ne 0 ] && echo "FAIL $stage: run_bench.py exited $rc"
  return 1
}

stage_command() {  # the command line of one stage, as one bash -c script
  local j="--out \"$RESULTS/json\""
  case $1 in
    preflight) echo "install_missing && \"\$PY\" scripts/gpu/preflight.py $j" ;;
    events|streams|decode|memcheck|nvmlbusy) echo "\"\$PY\" scripts/gpu/$1.py $j" ;;
    oom) echo "\"\$PY\" run_bench.py oomcheck --real --timeout 5" ;;  # a hang: 5 s x (cases + 1) in all
    matrix) echo "bench matrix gpu --only storage=mmap" ;;
    extras) echo "bench extras \"$RESULTS/scenarios/gpu-extras.toml\"" ;;
    profile) echo "bench profile gpu --only storage=mmap --only precision=amp --only preprocess=host --profile" ;;
    torchrun) echo "bench torchrun gpu --only storage=mmap --only precision=\$(bf16_or_amp) --only preprocess=device" ;;
    shared) echo "bench shared gpu --only storage=mmap --only precision=amp --only preprocess=host --share-gpu --world-size 2" ;;
  esac
}

bf16_or_amp() {  # the torchrun stage's precision: bf16 where native (compute capability 8.0), else amp
  "$PY" -c 'import torch; ok = torch.cuda.is_available() and torch.cuda.get_device_capability(0)[0] >= 8
print("bf16" if ok else "amp")' 2>/dev/null || echo amp
}

export -f install_missing bench bf16_or_amp profile_steps
DEFS="$(declare -p STEPS); $(declare -p CELLS); $(declare -p RANKS)"  # associative arrays cannot be exported: passed as text

# --- the stages ---------------------------------------------------------------------------------------
declare -A RESULT SECS WHY
SELECTED=" ${GPU_CHECK_STAGES:-${STAGES[*]}} "
run_stage() {
  local name=$1 log="$RESULTS/$1.log" started=$SECONDS rc
  if [[ $SELECTED != *" $name "* ]]; then RESULT[$name]=-; SECS[$name]=0; WHY[$name]="not selected"; return; fi
  local cmd; cmd=$(stage_command "$name")
  [ "$MODE" = dry ] && [ -n "${cmd##bench *}" ] && { RESULT[$name]=SKIP; SECS[$name]=0
                                                      WHY[$name]="not a run stage (--dry-run)"; return; }
  if [ "$name" != preflight ] && [[ $SELECTED == *" preflight "* ]] && [ "${RESULT[preflight]}" != PASS ] \
      && [ "$MODE" = run ]; then
    RESULT[$name]=SKIP; SECS[$name]=0; WHY[$name]="the preflight failed"; return
  fi
  echo "== $name (timeout ${LIMIT[$name]} s): $cmd" | tee "$log"
  timeout --kill-after=1 "${LIMIT[$name]}" bash -c "$DEFS; $cmd" >>"$log" 2>&1
  rc=$?
  SECS[$name]=$((SECONDS - started))
  case $rc in
    0) RESULT[$name]=PASS ;;
    77) RESULT[$name]=SKIP ;;
    124|137) RESULT[$name]=FAIL; WHY[$name]="timed out after ${LIMIT[$name]} s" ;;
    *) RESULT[$name]=FAIL ;;
  esac
  if [ -z "${WHY[$name]:-}" ]; then  # the stage's own verdict line, else its last line
    WHY[$name]=$(grep -E '^(PASS|FAIL|SKIP) ' "$log" | tail -n 1 | cut -c1-160)
    local last; last=$(grep -v '^\s*$' "$log" | tail -n 1 | cut -c1-150)
    [ -n "${WHY[$name]}" ] || WHY[$name]=$([ "$rc" -eq 0 ] && echo "$last" || echo "exit $rc: $last")
  fi
  [ "$name" = oom ] && WHY[$name]="${WHY[$name]} [2 ranks over gloo on GPU 0: NCCL refuses two ranks on one GPU]"
  [ "${RESULT[$name]}" = FAIL ] && tail -n 8 "$log" | sed 's/^/    | /'
  echo "   ${RESULT[$name]} $name (${SECS[$name]} s)"
}

echo "GPU check: OUT=$OUT (summary.txt, gpu-check.tar.gz), work in $RESULTS, data in $DATA, stage timeouts total $(total_s) s"
scenario_files
for s in "${STAGES[@]}"; do run_stage "$s"; done

{
  echo "== summary (stage result seconds: why) =="
  for s in "${STAGES[@]}"; do
    printf '%-9s %-4s %4s s  %s\n' "$s" "${RESULT[$s]}" "${SECS[$s]}" "${WHY[$s]:-}"
  done
  echo "total $SECONDS s; logs and results in $OUT/gpu-check.tar.gz (gpu-check/)"
} | tee "$RESULTS/summary.txt"
# OUT gets two files (a machine that hands back few files, none deep): the summary and one archive of
# everything textual (logs, figures, the runs' lines; no traces or plots), whose folder is gpu-check/
cp "$RESULTS/summary.txt" "$OUT/summary.txt"
tar -czf "$OUT/gpu-check.tar.gz" -C "$WORK" --exclude='traces' --exclude='plots' gpu-check 2>/dev/null \
  || echo "scripts/gpu_check.sh: could not write $OUT/gpu-check.tar.gz" >&2
# exit 0 only when every stage passed (--dry-run: when no run stage failed)
not_passed=FAIL
[ "$MODE" = run ] && not_passed='FAIL|SKIP'
! grep -qE "^[a-z]+ +($not_passed) " "$OUT/summary.txt"
