#!/usr/bin/env bash
# The CI regression gate (.ci/run runs `bash scripts/ci_gate.sh`; docs/ci-gate.md).
#
# 1. The baseline gate: 5 interleaved repeats of the ci scenario against results/baselines/ci.json, compared on
#    the gate's three figures, each at its own minimum effect and with its own verdict line (--gate-metric
#    figures: the loader's timed stages over its decode stage, the decode stage over a reference decode, the
#    rank's main thread CPU over a reference step, each reference timed in the same visit: the load cancels).
#    Exit 1 or 2 is the gate's at once. Exit 3: the baseline is not comparable here (another CPU model, CPU
#    count or allowed cores, or a machine probe that differs beyond its noise; a missing baseline too); a
#    machine of another CPU model is told before anything runs (the precheck).
# 2. Then, whether the baseline gate passed or could not compare, the A/B gate (harness/gates/ab_command.py):
#    this commit and its parent (HEAD^, checked out with `git worktree add` into a temp dir, removed on any
#    exit), single-repeat runs of the ci scenario each, interleaved parent/current/current/parent/..., in this
#    job on this machine, one --data-dir for both trees; exit 1 only on a significant regression of this commit
#    against its parent in one of the gate's figures (a rise of the figure's own minimum effect or more of a
#    cell's paired ratios, p < 0.05 / 3 for the cells together by an exact sign-flip test over the pairs). No
#    parent (a shallow clone) or a parent that cannot run the ci scenario: one line, the A/B marked NOT RUN,
#    and the gate exits 0 where the baseline gate passed. Why both: a baseline
#    made an hour or many commits earlier sits off by the machine's drift (measured: the loader figure 3.4%
#    below it half an hour later, quiet), which hid a 10% loader regression in 9 of 10 tries; the A/B measures
#    both commits in the same minutes (docs/ci-gate.md, "Measured on real commits").
#
# CI_GATE_BASELINE (default results/baselines/ci.json) and CI_GATE_AB_RUNS (runs per side, default 6: 12 runs of
# 8-10 s each on the quiet 2-core development machine, the A/B about 2 minutes; 7.1-8.5 minutes measured there
# while other test suites loaded the same 2 cores, 16 at load average 12-27; below 6 runs a side the A/B can
# never fail: 5 pairs reach at best p = 1/32, above 0.05 / 3) override the defaults; CI_GATE_DATA_DIR the data
# directory (default: this checkout's data/).
#
# Exit 5 (EXIT_NOT_RUN in harness/errors.py): NOT RUN, the gate measured nothing (no comparable baseline and no A/B:
# a shallow clone, a parent that cannot run), one loud line saying why; never 0. A work tree with uncommitted
# changes to tracked files is refused the same way before anything runs (its runs would be recorded under
# HEAD's name): commit or stash them. .ci/run hands the code to `run_bench.py ci-history`, which names it.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
baseline=${CI_GATE_BASELINE:-results/baselines/ci.json}
runs=${CI_GATE_AB_RUNS:-6}
data_dir=${CI_GATE_DATA_DIR:-$repo/data}
start=$(date +%s)
took() { echo "$(( $(date +%s) - start )) s"; }
NOT_RUN=5
nothing_measured() {  # $1: why the A/B did not run; $2: the baseline gate's exit code (0: it passed)
    if [ "$2" -eq 0 ]; then
        echo "ci gate: A/B NOT RUN: $1; the baseline gate passed: exit 0" >&2
        exit 0
    fi
    echo "ci gate: NOT RUN: nothing was measured: no comparable baseline, and $1; exit $NOT_RUN" >&2
    exit "$NOT_RUN"
}

if changed=$(git status --porcelain --untracked-files=no 2>/dev/null) && [ -n "$changed" ]; then
    echo "ci gate: NOT RUN: the work tree has uncommitted changes to $(echo "$changed" | wc -l) tracked file(s)" \
        "($(echo "$changed" | head -3 | cut -c4- | tr '\n' ' ' | sed 's/ $//')): the gate measures commits;" \
        "commit or stash them; exit $NOT_RUN" >&2
    exit "$NOT_RUN"
fi

# A Python error in the gate itself is exit 2 (the command line's one line for a bug), never 1 (a regression).
python run_bench.py gate-precheck "$baseline"
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then
    echo "ci gate: the machine precheck failed (exit $rc)" >&2
    exit 2
fi
if [ "$rc" -eq 0 ]; then
    python run_bench.py --scenario ci --repeats 5 --quiet --baseline "$baseline" --gate-metric figures \
        --data-dir "$data_dir"
    rc=$?
fi
if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then
    echo "ci gate (baseline $baseline): exit $rc in $(took)" >&2
    exit "$rc"
fi
if [ "$rc" -eq 0 ]; then
    echo "ci gate (baseline $baseline): passed in $(took); then this commit against its parent (A/B)" >&2
else
    echo "ci gate: the baseline is not comparable on this machine: this commit against its parent (A/B)" >&2
fi
if ! parent=$(git rev-parse --verify -q 'HEAD^' 2>/dev/null); then
    nothing_measured "this checkout has no parent commit (a shallow clone? fetch depth 2 or more)" "$rc"
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ci-gate.XXXXXX")
cleanup() {
    git worktree remove --force "$tmp/parent" >/dev/null 2>&1
    rm -rf "$tmp"
    git worktree prune >/dev/null 2>&1
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
if ! git worktree add --detach -q "$tmp/parent" "$parent" >/dev/null 2>&1; then
    nothing_measured "the parent commit ${parent:0:12} cannot be checked out here" "$rc"
fi
out="$repo/results/ci-gate-ab-$(date -u +%Y%m%dT%H%M%SZ)"
baseline_rc=$rc
python run_bench.py ab-gate --parent "$tmp/parent" --current "$repo" --data-dir "$data_dir" --out "$out" \
    --runs "$runs" --parent-label "${parent:0:12}"
rc=$?
if [ "$rc" -eq "$NOT_RUN" ]; then
    nothing_measured "the A/B against ${parent:0:12} gave no verdict (its line above)" "$baseline_rc"
fi
echo "ci gate (A/B against ${parent:0:12}, results in $out): exit $rc in $(took)" >&2
exit "$rc"
