"""A run directory as the history store's rows: the run (commit, time, scenario, settings hash,
machine fingerprint, verdict), one row per cell visit and one per effect. Read the way a report
reads a run directory (harness.results.rundir, every file upgraded on read), so every run directory
this harness reads can be added.

The machine fingerprint is the machine the baseline gate checks
(harness.results.baselinefile.machine_of, its MACHINE_KEYS: CPU model, CPU count, cores allowed)
plus the memory in whole GB, the GPUs' names and the torch version: runs of one fingerprint are the
ones a history gate compares. The hostname is recorded, not part of it (CI machines of one kind get
fresh hostnames). The settings hash is of env.json's `comparable` (what a baseline must share with
a run, harness.commands.bench.comparable_of).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from harness.analysis import stages
from harness.analysis.covariates import disturbed
from harness.analysis.effects import MIN_EFFECT, whole_passes
from harness.history.database import FIGURE_COLUMNS
from harness.report import verdict
from harness.report.effecttables import read_effects
from harness.results import rundir
from harness.results.baselinefile import MACHINE_KEYS, machine_of
from harness.results.cellresult import CellResult
from harness.results.environment import Environment
from harness.results.fileformat import ResultsError
from harness.results.repeats import merge_repeats

REQUIRED = ("env.json", "cells.jsonl")


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


def machine(env: Environment) -> dict:
    """What the fingerprint is made of, plus the hostname (recorded only)."""
    base = machine_of(env)
    memory = env.memory_gb
    return {**{k: base.get(k) for k in MACHINE_KEYS}, "memory_gb": round(memory) if memory else None,
            "gpus": list(env.gpus), "torch": env.torch_version, "hostname": env.hostname}


def fingerprint(described: dict) -> str:
    """The machine's fingerprint: a hash of `machine`'s keys but the hostname."""
    return _digest({k: v for k, v in described.items() if k != "hostname"})


def _visit(result: CellResult) -> dict:
    f = result.figures
    ci = f.throughput_ci if f.throughput_ci and len(f.throughput_ci) == 2 else (None, None)
    loader, rank = f.loader_cpu_s_per_sample, f.rank_cpu_s_per_sample
    profile = stages.profile(result.ranks) if result.measured else None  # None: no rank timed its stages
    return {"cell": result.cell, "repeat": result.repeat, "error": result.error,
            "throughput": f.throughput if result.measured else None, "throughput_low": ci[0],
            "throughput_high": ci[1], "au_pct": f.au_pct, "loader_cpu": loader, "rank_cpu": rank,
            "cpu_per_sample": loader + rank if loader is not None and rank is not None else None,
            "step_p50_ms": f.step_p50_ms, "disturbed": int(disturbed(result)),
            "loader_stages_cpu": profile.loader_s if profile else None,
            "decode_cpu": profile.per_sample["decode"] if profile else None, "other_cpu_pct": f.other_cpu_pct,
            **{k: getattr(f, k) for k in FIGURE_COLUMNS}}


def _gate_line(run_dir: Path) -> str:
    """comparison.md's summary line ("**0 slower, ...**"), "" when the run was not gated."""
    path = run_dir / "comparison.md"
    if not path.is_file():
        return ""
    first = next((ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()), "")
    return first.strip().strip("*")


def rows_of(run_dir: str | Path, branch: str = "") -> tuple[dict, list[dict], list[dict]]:
    """(the run, its visits, its effects) of a run directory. A ResultsError (one line) for a
    directory that is not a run's (no env.json or cells.jsonl), or whose files are damaged or
    newer."""
    run_dir = Path(run_dir)
    lacking = [name for name in REQUIRED if not (run_dir / name).is_file()]
    if lacking:
        raise ResultsError(f"{run_dir} is not a run directory (it lacks {' and '.join(lacking)}); pass a directory "
                           f"a run wrote (results/<time>-<scenario>)")
    env = rundir.read_env(run_dir)
    results = rundir.read_visits(run_dir)
    effects = read_effects(run_dir)
    if not env.scenario:
        raise ResultsError(f"{run_dir}/env.json names no scenario (a --loader-only or check run?); only a "
                           f"scenario's run can be added")
    described = machine(env)
    passes = whole_passes(results)
    lines = verdict.verdict_lines(merge_repeats(results), effects, env.run_cpus, passes,
                                  env.min_effect or MIN_EFFECT) if results else []
    run = {"run_key": _digest([run_dir.name, env.time_utc, env.hostname, env.scenario]),
           "run_dir": str(run_dir.absolute()), "commit_id": (env.git or {}).get("commit") or "unknown",
           "dirty": int(bool((env.git or {}).get("dirty"))), "branch": branch, "time_utc": env.time_utc,
           "scenario": env.scenario, "settings_hash": _digest(env.comparable or {}),
           "settings": json.dumps(env.comparable or {}, sort_keys=True), "machine_fp": fingerprint(described),
           "machine": json.dumps(described, sort_keys=True),
           "repeats": max((r.repeat for r in results), default=-1) + 1,
           "verdict": "\n".join(lines), "gate": _gate_line(run_dir)}
    return run, [_visit(r) for r in results], [{**e.__dict__} for e in effects]
