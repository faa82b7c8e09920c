"""The A/B gate (harness.gates.ab_command over harness.gates.trees and harness.gates.ab) and
scripts/ci_gate.sh: this commit against its parent, runs merged into one baseline a side (results.baselinefile.merge),
exit 1 only on a significant regression, exit 0 marked NOT RUN when there is no parent or it cannot run the
scenario, the parent's worktree removed on any exit."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO

from harness.gates import ab, ab_command, trees
from harness.gates.inputs import run_as_baseline
from harness.results.baselinefile import Baseline, BaselineError, machine_of, merge
from harness.results.environment import Environment

NOT_RUN = 5  # the gate's documented code for "measured nothing" (harness.errors.EXIT_NOT_RUN, docs/ci-gate.md)

CELLS = ["storage=raw,batching=fixed", "storage=mmap,batching=fixed", "storage=hdf5,batching=dynamic"]
GATE_FIGURES = {"loader_vs_decode": 1.4, "decode_vs_reference": 0.25, "rank_vs_reference": 0.5}
COMPARABLE = {"dataset_key": "k", "world_size": 2, "workload": "pixels", "batch_size": 16,
              "accelerator": "V100-16GB", "emulated": True}


def write_run(path: Path, cpu: dict[str, float] | None = None, seq: int = 0, comparable: dict | None = None,
              errors: tuple[str, ...] = (), cpu_model: str = "AMD EPYC", probe: float = 1.0) -> Path:
    """A single-repeat run directory: each cell's loader + rank CPU per sample 0.6 ms x cpu[cell], and the gate's
    three figures (loader / decode 1.4, decode / reference 0.25, rank / reference 0.5) x cpu[cell], +-3% by
    `seq` (deterministic), throughput 1000 samples/s, the probe 4000 samples/s x `probe`."""
    path.mkdir(parents=True)
    noise = 1 + 0.01 * (seq * 7 % 7 - 3)
    lines = []
    for i, cell in enumerate(CELLS):
        c = 0.0006 * (cpu or {}).get(cell, 1.0) * noise * (1 + 0.002 * i)
        figures = {"throughput": 1000.0 / noise, "step_p50_ms": 16.0, "loader_cpu_s_per_sample": c / 2,
                   "rank_cpu_s_per_sample": c / 2, **{k: v * c / 0.0006 for k, v in GATE_FIGURES.items()}}
        lines.append({"cell": cell, "repeat": 0, "error": "OOM" if cell in errors else None,
                      "figures": {} if cell in errors else figures, "params": {"storage": {}}})
    (path / "cells.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (path / "probe.jsonl").write_text(json.dumps({"repeat": 0, "ideal_samples_per_s": 4000.0 * probe * noise,
                                                  "memcpy_gb_s": 15.0}) + "\n")
    env = {"scenario": "ci", "comparable": comparable or COMPARABLE, "cpu_model": cpu_model, "cpu_count": 2,
           "cpu_affinity": 2, "hostname": f"host{seq}", "memory_gb": 25.0, "versions": {},
           "git": {"commit": "c0ffee", "dirty": False}}
    (path / "env.json").write_text(json.dumps(env))
    return path


class FakeRunner:
    """Stands in for the bench runs: writes a run directory per call, records the order of the sides."""

    def __init__(self, cpu: dict[str, dict[str, float]] | None = None, fail: dict[str, int] | None = None,
                 comparable: dict[str, dict] | None = None, probe: dict[str, float] | None = None):
        self.cpu, self.fail, self.comparable, self.calls = cpu or {}, fail or {}, comparable or {}, []
        self.probe = probe or {}

    def __call__(self, side: str, tree: Path, out: Path) -> trees.Outcome:
        self.calls.append(side)
        if side in self.fail:
            return trees.Outcome(self.fail[side], None, "run_bench.py: error: no scenario named ci", 1.0)
        run = write_run(out / f"run{len(self.calls)}", self.cpu.get(side), len(self.calls),
                        self.comparable.get(side), probe=self.probe.get(side, 1.0))
        return trees.Outcome(0, run, "", 20.0)


def gate(tmp_path, runner, runs=6) -> int:
    return ab_command.main(tmp_path / "parent", tmp_path / "current", tmp_path / "data", tmp_path / "out", runs=runs,
                        parent_label="abc123", runner=runner)


def test_the_sides_alternate_in_balanced_pairs():
    assert trees.interleaved(3) == ["parent", "current", "current", "parent", "parent", "current"]
    assert trees.interleaved(6).count("parent") == 6 == trees.interleaved(6).count("current")


def test_merge_concatenates_the_runs_repeats_in_order(tmp_path):
    parts = [run_as_baseline(write_run(tmp_path / f"r{i}", seq=i)) for i in range(3)]
    merged = merge(parts)
    cell = merged.cells[CELLS[0]]
    assert cell.cpu_s_per_sample == [p.cells[CELLS[0]].cpu_s_per_sample[0] for p in parts]
    assert len(cell.throughput) == len(cell.normalised) == len(cell.step_p50_ms) == 3
    assert merged.probe.ideal_samples_per_s == [p.probe.ideal_samples_per_s[0] for p in parts]
    assert merged.comparable == COMPARABLE and merged.scenario == "ci" and merged.git["commit"] == "c0ffee"
    assert Baseline.from_json(json.loads(json.dumps(merged.to_json()))) == merged  # a baseline like any other


def test_merge_keeps_an_error_and_refuses_runs_that_differ(tmp_path):
    ok = run_as_baseline(write_run(tmp_path / "ok"))
    failed = run_as_baseline(write_run(tmp_path / "failed", seq=1, errors=(CELLS[1],)))
    merged = merge([ok, failed, ok])
    assert merged.cells[CELLS[1]].error == "OOM" and merged.cells[CELLS[1]].cpu_s_per_sample == []
    assert len(merged.cells[CELLS[0]].cpu_s_per_sample) == 3
    other = run_as_baseline(write_run(tmp_path / "other", comparable=dict(COMPARABLE, batch_size=8)))
    with pytest.raises(BaselineError, match="run 2 differs from run 1 in batch_size"):
        merge([ok, other], "the parent's runs")
    xeon = run_as_baseline(write_run(tmp_path / "xeon", cpu_model="Intel(R) Xeon(R) Processor"))
    with pytest.raises(BaselineError, match="differs from run 1 in cpu_model"):
        merge([ok, xeon])
    with pytest.raises(BaselineError, match="nothing to merge"):
        merge([])


def test_the_same_code_passes(tmp_path, capsys):
    runner = FakeRunner()
    assert gate(tmp_path, runner) == 0
    assert runner.calls == trees.interleaved(6)
    out, err = capsys.readouterr()
    for line in ("0 slower, 0 faster, 3 unchanged (metric: loader: timed stages / decode stage, min effect 7%, "
                 "alpha 0.0167)", "0 slower, 0 faster, 3 unchanged (metric: decode: decode stage / reference decode, "
                 "min effect 10%, alpha 0.0167)", "0 slower, 0 faster, 3 unchanged (metric: rank: main thread CPU / "
                 "reference step, min effect 20%, alpha 0.0167)"):
        assert f"- passed: {line}" in out and f"  {line}" in err
    assert "passed" in err.splitlines()[-4]
    assert "against its parent abc123, 6 against 6 single-repeat runs in 6 interleaved pairs" in err
    assert "paired sign-flip test, max over cells, alpha 0.05 over the 3 cells and 3 figures together" in err
    assert (tmp_path / "out" / "comparison.md").read_text().startswith("**0 slower")


def test_a_planted_loader_slowdown_fails_and_a_small_one_does_not(tmp_path, capsys):
    assert gate(tmp_path / "big", FakeRunner({"current": {CELLS[1]: 1.3}})) == 1
    out, err = capsys.readouterr()
    row = next(line for line in out.splitlines() if line.startswith(CELLS[1]))
    assert "slower" in row and "+30.0%" in row and "FAILED (a significant regression" in err
    # below every figure's own minimum effect (7%, 10%, 20%)
    assert gate(tmp_path / "small", FakeRunner({"current": {CELLS[1]: 1.04}})) == 0
    # faster is no failure; the probe is not checked between the two sides of one job (a commit may change it)
    assert gate(tmp_path / "fast", FakeRunner({"current": {c: 0.5 for c in CELLS}}, probe={"current": 2.0})) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert "passed" in err[-4] and all(line.startswith("  0 slower, 3 faster") for line in err[-3:])


def test_the_cpu_metric_is_one_line_and_its_own_min_effect(tmp_path, capsys):
    """--gate-metric cpu: one figure at --min-effect (a 10% rise is below 15%), one verdict line."""
    runner = FakeRunner({"current": {CELLS[1]: 1.1}})
    assert ab_command.main(tmp_path / "p", tmp_path / "c", tmp_path / "d", tmp_path / "out", metric="cpu",
                        runner=runner) == 0
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "passed: 0 slower, 0 faster, 3 unchanged (metric: loader + rank CPU s/sample, min effect 15%" in last


@pytest.mark.parametrize("rc", [1, 2])
def test_a_parent_that_cannot_run_is_not_run_exit_5(tmp_path, capsys, rc):
    runner = FakeRunner(fail={"parent": rc})
    assert gate(tmp_path, runner) == NOT_RUN and runner.calls == ["parent"]  # stops at once, measures nothing else
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert line.startswith("ci gate: NOT RUN: the parent commit abc123 cannot run the scenario here (exit")
    assert "no scenario named ci" in line and line.endswith("exit 5 (no verdict on this commit)")


def test_a_parent_with_other_settings_is_not_run_exit_5(tmp_path, capsys):
    runner = FakeRunner(comparable={"parent": dict(COMPARABLE, batch_size=8)})
    assert gate(tmp_path, runner, runs=2) == NOT_RUN
    err = capsys.readouterr().err
    assert "NOT RUN: the parent commit abc123 runs the scenario with other settings" in err
    assert "baseline is for batch_size=8, this run has 16" in err


@pytest.mark.parametrize("rc, code", [(1, 1), (2, 2), (124, 2)])
def test_this_commits_failed_run_fails_the_gate(tmp_path, capsys, rc, code):
    runner = FakeRunner(fail={"current": rc})
    assert gate(tmp_path, runner) == code and runner.calls == ["parent", "current"]
    assert f"ci gate: FAILED: this commit's run of the scenario failed (exit {rc}" in capsys.readouterr().err


@pytest.fixture
def this_machine(monkeypatch) -> dict:
    """This machine as the precheck sees it, fixed (capturing the environment runs git: seconds)."""
    env = Environment(cpu_model="AMD EPYC", cpu_count=2, cpu_affinity=2, hostname="here", memory_gb=25.0)
    monkeypatch.setattr(ab_command.Environment, "capture", staticmethod(lambda argv, device: env))
    return machine_of(env)


def test_precheck_refuses_another_cpu_model_before_anything_runs(tmp_path, capsys, this_machine):
    here = this_machine
    base = run_as_baseline(write_run(tmp_path / "r", cpu_model="Some Other CPU"))
    base.machine = dict(here, cpu_model="Some Other CPU")
    base.save(tmp_path / "other.json")
    assert ab_command.precheck(tmp_path / "other.json") == 3
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("ci gate: the baseline is from another machine: CPU model Some Other CPU there, ")
    base.machine = dict(here, hostname="elsewhere")
    base.save(tmp_path / "here.json")
    assert ab_command.precheck(tmp_path / "here.json") == 0  # the probe is checked after the run
    assert ab_command.precheck(tmp_path / "missing.json") == 3 and "does not exist" in capsys.readouterr().err


@pytest.mark.slow  # a process
def test_each_tree_runs_its_own_harness(tmp_path):
    """The parent's run_bench.py imports the parent's harness, not this checkout's (installed editable)."""
    tree = tmp_path / "tree"
    (tree / "harness").mkdir(parents=True)
    (tree / "harness" / "__init__.py").write_text("")
    (tree / "run_bench.py").write_text("import sys, harness\nprint(harness.__file__, file=sys.stderr)\n"
                                       "sys.exit(2)\n")
    o = trees.bench_runner("ci", tmp_path / "data")("parent", tree, tmp_path / "out")
    assert o.code == 2 and o.run_dir is None and o.detail == str(tree / "harness" / "__init__.py")


def test_a_runs_outcome_is_its_new_run_directory_and_its_last_error_line(tmp_path):
    """What bench_runner makes of a finished process (its slow test above runs one)."""
    (tmp_path / "old").mkdir()
    before = set(tmp_path.iterdir())
    for name in ("a-ci", "b-ci", "c-nothing"):
        (tmp_path / name).mkdir()
    for name in ("a-ci", "b-ci"):
        (tmp_path / name / "cells.jsonl").write_text("")
    o = trees.outcome(1, "warming\nrun_bench.py: error: boom\nresults: b-ci\n\n", tmp_path, before, 3.0)
    assert o == trees.Outcome(1, tmp_path / "b-ci", "run_bench.py: error: boom", 3.0)
    assert trees.outcome(0, None, tmp_path, set(tmp_path.iterdir()), 0.0) == trees.Outcome(0, None, "", 0.0)


def test_the_runs_stop_at_the_first_failure_with_its_side(tmp_path, capsys):
    runs = trees.measure(tmp_path / "p", tmp_path / "c", tmp_path / "out", 3, FakeRunner(fail={"current": 2}))
    assert runs.failed[0] == "current" and runs.failed[1].code == 2 and len(runs.dirs["parent"]) == 1
    assert capsys.readouterr().err.splitlines() == ["ci gate A/B: run 1/6 parent: exit 0 in 20 s",
                                                    "ci gate A/B: run 2/6 current: exit 2 in 1 s"]
    whole = trees.measure(tmp_path / "p", tmp_path / "c", tmp_path / "out2", 2, FakeRunner())
    assert whole.failed is None and [len(whole.dirs[s]) for s in ("parent", "current")] == [2, 2]


def test_the_judgement_says_why_there_is_no_verdict(tmp_path):
    """The parent's runs unreadable or of other settings: no verdict (exit 0); this commit's: exit 2."""
    good = [write_run(tmp_path / f"g{i}", seq=i) for i in range(2)]
    other = [write_run(tmp_path / "o", comparable=dict(COMPARABLE, batch_size=8))]
    j = ab.judge([tmp_path / "missing"], good, parent_label="abc")
    assert j.verdict is None and j.exit_code == 0 and j.not_run.startswith("the parent commit abc's runs")
    j = ab.judge(good, [tmp_path / "missing"])
    assert j.verdict is None and j.exit_code == 2 and "is not a directory" in j.error
    j = ab.judge(other, good, parent_label="abc")
    assert j.exit_code == 0 and "runs the scenario with other settings" in j.not_run
    j = ab.judge(good, good)
    assert j.cells == 3 and j.verdict.exit_code == j.exit_code == 0 and not (j.error or j.not_run)


def test_the_gate_power_script_judges_as_the_gate_does(tmp_path, capsys):
    """scripts/history_gate_power.py calls the judgement itself (not the command): the same exit code, the same
    comparison.md."""
    spec = importlib.util.spec_from_file_location("history_gate_power", REPO / "scripts" / "history_gate_power.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    parent = [write_run(tmp_path / f"p{i}", seq=i) for i in range(4)]
    for plant, code in ((1.0, 0), (1.5, 1)):
        current = [write_run(tmp_path / f"c{plant}-{i}", {CELLS[1]: plant}, seq=i) for i in range(4)]
        assert ab_command.judge(parent, current, tmp_path / f"gate{plant}", alpha=0.5) == code
        assert script.ab_code(ab.judge(parent, current, alpha=0.5), tmp_path / f"script{plant}") == code
        assert (tmp_path / f"script{plant}" / "comparison.md").read_text() == \
            (tmp_path / f"gate{plant}" / "comparison.md").read_text()
    assert script.ab_code(ab.judge([tmp_path / "none"], parent), tmp_path / "no") == 0
    assert not (tmp_path / "no").exists()


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def script_repo(tmp_path: Path, parent_run_bench: str | None) -> Path:
    """A git repository holding scripts/ci_gate.sh: one commit, or (with `parent_run_bench`) a parent commit
    whose run_bench.py is that text, then the script's commit. The harness comes from this checkout."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    for key, value in (("user.email", "t@example.com"), ("user.name", "t"), ("commit.gpgsign", "false")):
        git(repo, "config", key, value)
    if parent_run_bench is not None:
        (repo / "run_bench.py").write_text(parent_run_bench)
        git(repo, "add", "run_bench.py")
        git(repo, "commit", "-q", "-m", "parent")
    (repo / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "ci_gate.sh", repo / "scripts" / "ci_gate.sh")
    shutil.copy(REPO / "run_bench.py", repo / "run_bench.py")  # the entry the script calls; harness: PYTHONPATH
    git(repo, "add", "scripts", "run_bench.py")
    git(repo, "commit", "-q", "-m", "this commit")
    return repo


def run_script(repo: Path, tmp_path: Path, pythonpath: Path = REPO) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(pythonpath), TMPDIR=str(tmp_path))  # no baseline there: exit 3, A/B
    return subprocess.run(["bash", str(repo / "scripts" / "ci_gate.sh")], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.slow  # git and bash processes
def test_the_script_without_a_parent_commit_or_a_baseline_measured_nothing_exit_5(tmp_path):
    """A depth-1 clone with no comparable baseline measured nothing: NOT RUN and exit 5, never 0."""
    proc = run_script(script_repo(tmp_path, None), tmp_path)
    assert proc.returncode == NOT_RUN, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "ci gate: NOT RUN: nothing was measured: no comparable baseline, and this checkout has no parent commit "
        "(a shallow clone? fetch depth 2 or more); exit 5")


def test_the_script_refuses_a_dirty_work_tree_before_anything_runs(tmp_path):
    """Uncommitted changes would be measured under HEAD's name: NOT RUN, exit 5, nothing run."""
    repo = script_repo(tmp_path, None)
    with open(repo / "run_bench.py", "a") as f:
        f.write("# a local change\n")
    proc = run_script(repo, tmp_path)
    assert proc.returncode == NOT_RUN, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line == ("ci gate: NOT RUN: the work tree has uncommitted changes to 1 tracked file(s) (run_bench.py): "
                    "the gate measures commits; commit or stash them; exit 5")
    assert not (repo / "results").exists()


@pytest.mark.slow  # git and bash processes
def test_the_script_with_a_parent_that_cannot_run_exits_5_and_removes_its_worktree(tmp_path):
    repo = script_repo(tmp_path, "import sys\nsys.exit('run_bench.py: error: no scenario named ci')\n")
    proc = run_script(repo, tmp_path)
    assert proc.returncode == NOT_RUN, proc.stderr
    assert "ci gate: NOT RUN: the parent commit " in proc.stderr and "no scenario named ci" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("ci gate: NOT RUN: nothing was measured")
    assert "does not exist" in proc.stderr  # the baseline gate's exit 3, in one line, came first
    assert len(git(repo, "worktree", "list").splitlines()) == 1  # the parent's worktree is gone
    assert not list(tmp_path.glob("ci-gate.*"))  # and its temp dir


@pytest.mark.slow  # git and bash processes
def test_a_python_error_in_the_gate_is_exit_2_never_1(tmp_path):
    """A harness that cannot even import (a bug in this commit): one line, exit 2 (a run error), not 1."""
    broken = tmp_path / "broken"
    (broken / "harness").mkdir(parents=True)
    (broken / "harness" / "__init__.py").write_text("raise ImportError('planted')\n")
    proc = run_script(script_repo(tmp_path, None), tmp_path, pythonpath=broken)
    assert proc.returncode == 2, proc.stderr
    assert "internal error (a bug in the harness): cannot import it: ImportError: planted" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_family_of_cells_is_tested_together(tmp_path, capsys):
    """One cell 30% dearer in 4 of its 6 pairs, the other cells unchanged: S = 4a / sqrt(4 a^2) = 2, reached
    by the 2^2 patterns whose first four signs are +1 (the unchanged cells' S is 0 under every pattern):
    p = 4/64 = 0.0625, not < 0.05; at alpha 0.1 it is slower. The gate's three figures are a family too: each
    is tested at alpha / 3, so the same runs fail them only at alpha 0.2 (0.067 each)."""
    parent = [write_run(tmp_path / f"p{i}", seq=i) for i in range(6)]
    current = [write_run(tmp_path / f"c{i}", {CELLS[1]: 1.3 if i < 4 else 1.0}, seq=i) for i in range(6)]
    assert ab_command.judge(parent, current, tmp_path / "out", metric="cpu") == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(CELLS[1]))
    assert "unchanged" in row and " 0.0625 " in row
    assert ab_command.judge(parent, current, tmp_path / "out", alpha=0.1, metric="cpu") == 1
    assert ab_command.judge(parent, current, tmp_path / "out", alpha=0.1) == 0
    assert ab_command.judge(parent, current, tmp_path / "out", alpha=0.2) == 1


def test_a_pairs_shared_load_cancels(tmp_path):
    """Each pair's two runs under one load (x0.8 .. x1.5, as a shared machine's minutes differ), this commit
    20% dearer in one cell: the paired ratios are all x1.2 (p = 1/64, slower); paired with the wrong
    neighbours, the load does not cancel and the same runs show nothing."""
    loads = [1.0, 1.5, 0.8, 1.3, 0.9, 1.2]
    parent = [write_run(tmp_path / f"p{i}", {c: x for c in CELLS}, seq=i) for i, x in enumerate(loads)]
    current = [write_run(tmp_path / f"c{i}", {c: x * (1.2 if c == CELLS[1] else 1.0) for c in CELLS}, seq=i)
               for i, x in enumerate(loads)]
    j = ab.judge(parent, current, metric="cpu")
    rows = {r.cell: r for r in j.verdict.comparisons[0].rows}
    assert j.exit_code == 1 and j.pairs == 6
    assert rows[CELLS[1]].verdict == "slower" and rows[CELLS[1]].p == pytest.approx(1 / 64)
    assert rows[CELLS[1]].ratio == pytest.approx(1.2)
    assert {rows[c].verdict for c in (CELLS[0], CELLS[2])} == {"unchanged"}
    shifted = ab.judge(parent, current[1:] + current[:1], metric="cpu")
    assert shifted.exit_code == 0


def test_fewer_than_five_pairs_cannot_fail(tmp_path):
    """4 pairs reach at best p = 1/16 = 0.0625: inconclusive at 0.05, exit 0 even for a 50% rise."""
    parent = [write_run(tmp_path / f"p{i}", seq=i) for i in range(4)]
    current = [write_run(tmp_path / f"c{i}", {CELLS[1]: 1.5}, seq=i) for i in range(4)]
    j = ab.judge(parent, current)
    assert j.exit_code == 0 and {r.verdict for c in j.verdict.comparisons for r in c.rows} == {"inconclusive"}
    assert j.verdict.comparisons[0].rows[1].note == "4 pairs: a sign-flip test cannot reach p<0.0167"
    assert ab.judge(parent, current[:3]).error.startswith("4 runs of the parent against 3 of this commit")


@pytest.mark.parametrize("d, p", [
    ([[0.1]] * 6, [1 / 64]),  # all six pairs agree: only the observed pattern reaches it
    ([[0.1]] * 5 + [[-0.1]], [7 / 64]),  # sum 0.4: the patterns with at least 5 of 6 signs agreeing, 6 + 1
    ([[0.3], [0.1], [0.2], [-0.05], [0.4], [0.25]], [2 / 64]),  # the observed, and the one flipping -0.05
    ([[-0.1]] * 6, [1 / 64]),  # the other direction alike (the all -1 pattern)
    # two cells: A agrees in all six pairs, B in the first three: A's 1/64 alone, 2/64 in the family (B's
    # pattern +++--- reaches A's statistic sqrt(6) too); B's S is 0, and the max stays below 0 only where the
    # first three signs sum to -3 and the last three to -1 or +1 (2 x 3 patterns): 58/64
    ([[0.1, 0.1]] * 3 + [[0.1, -0.1]] * 3, [2 / 64, 58 / 64]),
    ([[0.0]] * 6, [1.0]),  # no change at all
])
def test_the_sign_flip_p_by_hand(d, p):
    """2^6 = 64 sign patterns over 6 pairs, counted by hand."""
    _, got = ab.sign_flip_p(d)
    assert list(got) == pytest.approx(p)


def test_many_pairs_sample_the_patterns():
    """Beyond EXACT_PAIRS pairs, seeded random patterns: the all-agreeing case's p is about 1 / (patterns)."""
    n = ab.EXACT_PAIRS + 4
    assert ab.sign_patterns(n).shape == (ab.SAMPLED_PATTERNS + 1, n)
    _, p = ab.sign_flip_p([[0.1]] * n)
    assert p[0] < 3 / ab.SAMPLED_PATTERNS
    assert ab.sign_patterns(3).tolist()[0] == [1, 1, 1] and len(ab.sign_patterns(3)) == 8
