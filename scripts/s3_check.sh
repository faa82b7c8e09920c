#!/usr/bin/env bash
# The remote path for real (docs/remote.md): the project's own S3-compatible store (moto's server mode) in a
# network namespace of its own, a veth pair shaped with tc, the remote scenario run against it, then a run
# killed mid-way; after each, nothing of the project's is left: no server, namespace, veth link or qdisc.
#
#   bash scripts/s3_check.sh                 # root (namespaces and tc), moto[server] and obstore installed
#   S3_CHECK_SCENARIO=remote-slow bash scripts/s3_check.sh
#
# Installs iproute2 with apt-get when ip or tc is missing (root only). Data and results live in a fresh temp
# directory, removed after a pass (S3_CHECK_KEEP=1 keeps it) and kept, its path printed, after a failure. It
# stops only what it started, on any exit. One line per step at the end; exit 0 only when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
PYTHON=${PYTHON:-python}
SCENARIO=${S3_CHECK_SCENARIO:-remote}
RUN_TIMEOUT=${S3_CHECK_RUN_TIMEOUT:-900}   # seconds the scenario may take

WORK=$(mktemp -d /tmp/dlbench-s3.XXXXXX)
PIDS=()              # the runs this script started
STEPS=()             # "PASS|FAIL|SKIP name: detail", printed at the end
FAILED=0
START=$SECONDS

say() { echo "s3_check: $*" >&2; }
step() {  # step STATUS NAME DETAIL
    STEPS+=("$1 $2: $3")
    [ "$1" = PASS ] || FAILED=1
    say "$1 $2: $3"
}

left_behind() {  # what of the project's is still here: servers, namespaces, links, qdiscs on lo
    "$PYTHON" - <<'PY'
import subprocess
from harness.lab.link import leftovers
left = leftovers()
servers = subprocess.run(["pgrep", "-f", "moto.server"], capture_output=True, text=True).stdout.split()
left += [f"moto server pid {p}" for p in servers]
print("; ".join(left))
PY
}

cleanup() {
    local code=$?
    local i line left
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        kill "${PIDS[i]}" 2>/dev/null && wait "${PIDS[i]}" 2>/dev/null
    done
    if [ "$code" -ne 0 ] && [ "$FAILED" -eq 0 ]; then
        step FAIL interrupted "exit $code before every step had run"
    fi
    for name in install preflight run killed; do
        [[ " ${STEPS[*]} " == *" $name: "* ]] || STEPS+=("SKIP $name: not run")
    done
    STEPS+=("$([ "$FAILED" -eq 0 ] && echo PASS || echo FAIL) total: $((SECONDS - START)) s")
    echo "s3_check summary:"
    for line in "${STEPS[@]}"; do echo "  $line"; done
    if [ "$FAILED" -eq 0 ] && [ "$code" -eq 0 ]; then
        [ -n "${S3_CHECK_KEEP:-}" ] || rm -rf "$WORK"
        echo "s3_check: all steps passed${S3_CHECK_KEEP:+ (kept: $WORK)}"
    else
        echo "s3_check: FAILED (logs and results kept in $WORK)"
        [ "$code" -eq 0 ] && code=1
    fi
    exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

install() {
    if command -v ip >/dev/null && command -v tc >/dev/null; then
        step PASS install "$(ip -V 2>&1 | head -n 1), tc present"
        return 0
    fi
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
        step FAIL install "ip and tc are missing and this is not root with apt-get: apt-get install -y iproute2"
        return 1
    fi
    if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q iproute2; } >"$WORK/apt.log" 2>&1; then
        step FAIL install "apt-get install iproute2 failed (log: $WORK/apt.log)"
        return 1
    fi
    step PASS install "iproute2 installed with apt-get"
}

preflight() {
    local why
    if [ "$(id -u)" -ne 0 ]; then
        step FAIL preflight "not root: network namespaces and tc need root (run as root, as CI does)"
        return 1
    fi
    if ! why=$("$PYTHON" -c "import moto.server, obstore, boto3, harness" 2>&1); then
        step FAIL preflight "moto[server], obstore or boto3 is missing ($(tail -n 1 <<<"$why")): pip install 'moto[server]' obstore boto3"
        return 1
    fi
    left=$(left_behind)
    if [ -n "$left" ]; then
        step FAIL preflight "something of the project's is already here before the check: $left"
        return 1
    fi
    step PASS preflight "root, moto $("$PYTHON" -c 'import moto; print(moto.__version__)'), obstore $("$PYTHON" -c 'import obstore; print(obstore.__version__)'), netem $("$PYTHON" -c 'from harness.lab.link import has_netem; print("present" if has_netem() else "absent (bandwidth alone, with tbf)")')"
}

run_step() {
    local start=$SECONDS rc left run
    timeout "$RUN_TIMEOUT" "$PYTHON" run_bench.py --scenario "$SCENARIO" --out "$WORK/results" \
        --data-dir "$WORK/data" --quiet >"$WORK/run.log" 2>&1 &
    PIDS+=($!)
    wait "${PIDS[-1]}"
    rc=$?
    run=$(ls -d "$WORK"/results/*/ 2>/dev/null | head -n 1)
    left=$(left_behind)
    if [ "$rc" -ne 0 ] || [ -z "$run" ] || [ ! -f "$run/remote.md" ] || [ ! -f "$run/report.md" ] || [ -n "$left" ]; then
        tail -n 20 "$WORK/run.log" >&2
        step FAIL run "--scenario $SCENARIO exit $rc, run directory ${run:-none}, remote.md $([ -n "$run" ] && [ -f "$run/remote.md" ] && echo written || echo MISSING), left behind: ${left:-nothing} (log: $WORK/run.log)"
        return 1
    fi
    local visits windowed
    visits=$(grep -c '' "$run/cells.jsonl")
    windowed=$(grep -c '"remote_wait_ms_per_sample"' "$run/cells.jsonl")
    if [ "$windowed" -ne "$visits" ]; then
        step FAIL run "--scenario $SCENARIO: $((visits - windowed)) of $visits visit(s) in cells.jsonl lack the remote figures over their window (remote_*; docs/results-format.md)"
        return 1
    fi
    step PASS run "--scenario $SCENARIO exit 0 in $((SECONDS - start)) s; $(grep -c '^| s3(' "$run/remote.md") storage settings in remote.md; the window's remote figures in $windowed of $visits visits; nothing left behind"
}

killed_step() {  # the run killed once its server and link are up: nothing may be left
    local start=$SECONDS left pid
    "$PYTHON" run_bench.py --scenario "$SCENARIO" --out "$WORK/results-killed" \
        --data-dir "$WORK/data" --quiet >"$WORK/killed.log" 2>&1 &
    pid=$!
    PIDS+=($pid)
    while [ $((SECONDS - start)) -lt 60 ] && ! grep -qs "object store: moto at" "$WORK/killed.log"; do sleep 0.5; done
    if ! grep -qs "object store: moto at" "$WORK/killed.log"; then
        kill -TERM "$pid"
        step FAIL killed "the run did not start its store within 60 s (log: $WORK/killed.log)"
        return 1
    fi
    sleep 3
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null
    sleep 2
    left=$(left_behind)
    if [ -n "$left" ]; then
        step FAIL killed "after SIGTERM to the run: still here: $left"
        return 1
    fi
    step PASS killed "SIGTERM $((SECONDS - start)) s into a run: no server, namespace, link or qdisc left"
}

main() {
    install || return 1
    preflight || return 1
    run_step || return 1
    killed_step
}

main
