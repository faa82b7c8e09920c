"""A baseline: a run's throughput per cell and repeat, saved to compare later runs with (the CI
gate).

File format "dlbench-baseline/1" (JSON; keys are stable, new optional keys may be added without
bumping the version, any change of meaning bumps it), versioned through harness.results.fileformat
like every file a run writes (BASELINE: its version, BASELINE_HISTORY; the "schema" key beside the
"format" string, which older harnesses read):

    {"format": "dlbench-baseline/1", "schema": 1, "created": "<UTC ISO time>", "scenario": "ci",
     "comparable": {"dataset_key": "<hash>", "world_size": 2, "workload": "pixels", "batch_size":
     8,
                    "accelerator": "V100-16GB", "emulated": true,
                    "device": "V100-16GB (emulated)", "image_size": 64, "steps": 12, "epochs": 0,
                    "warmup_steps": 2, "workers": 1, "prefetch_factor": 2, "cache_state": "as-is"},
     "machine": {"cpu_model": ..., "cpu_count": ..., "cpu_affinity": ..., "hostname": ...,
     "memory_gb": ...}, "versions": {...}, "git": {...}, "probe": {"ideal_samples_per_s": [per
     repeat], "memcpy_gb_s": [per repeat]}, "cells": {"<cell id>": {"throughput": [per repeat],
     "normalised": [per repeat],
                             "step_p50_ms": [per repeat], "error": null,
                             "params": {"<axis>": {<the strategy's parameters>}}}}}

- `comparable` must be equal between a baseline and a run, key by key, or they are not compared
  (exit 3). `device` is the real device: on CUDA the GPU's name, on an emulated run "<accelerator>
  (emulated)". Baselines written before `device`, `image_size`, `steps`, `epochs`, `warmup_steps`,
  `workers`, `prefetch_factor` and `cache_state` were added lack them: they are compared on the
  keys both sides have, with one warning naming the keys that could not be checked
  (analysis.compare).
- `params` (optional, added later in version 1): a cell whose strategies' parameters differ between
  the baseline and the run is not compared; without `params` on either side, cells are matched by
  id alone.
- `normalised[i]` is the cell's `vs_probe` figure in repeat i (results.vsprobe.relative_to_probe):
  throughput / the same repeat's machine probe, so a baseline made on another machine still means
  something.
- `cpu_s_per_sample[i]` (optional, added later in version 1): the loader's and the rank's CPU
  seconds per sample in repeat i, the second gate metric (`--gate-metric cpu`): it moves with the
  code's cost, not with how much of a shared runner's CPU the run got.
- `loader_vs_decode[i]`, `decode_vs_reference[i]`, `rank_vs_reference[i]` (optional, added later in
  version 1): the gate's figures of repeat i (harness.results.metrics.against_reference;
  `--gate-metric figures`), CPU costs over work timed in the same visit, in which the machine's
  load cancels. The reference work's version is not compared (each rank record carries it): a
  change of it is regenerated with the baseline.
- `machine` and `probe` decide whether a baseline was made on this kind of machine
  (analysis.compare): the CPU model, its CPU count and the cores the run was allowed
  (`cpu_affinity`, added later in version 1) must be equal, and the probe's figures must not differ
  beyond their noise; `hostname` and `memory_gb` are recorded only.
- A cell that errored in any repeat keeps the error(s) and no samples (all lists empty).
- `merge` makes one baseline of several runs of one scenario on one machine (the A/B gate's
  single-repeat runs of one tree, harness.gates.ab_command): their repeats in the order given.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from harness import safewrite
from harness.errors import UsageError
from harness.results.cellresult import CellResult, duplicated_visit
from harness.results.environment import Environment
from harness.results.fileformat import VERSION_KEY, FileFormat, ResultsError
from harness.results.probeline import ProbeSeries
from harness.results.vsprobe import relative_to_probe

FORMAT = "dlbench-baseline/1"
BASELINE_VERSION = 1
BASELINE_HISTORY = {
    1: "every baseline so far: format 'dlbench-baseline/1'; added within version 1, all optional: cells' params "
       "and cpu_s_per_sample, machine.cpu_affinity, the schema key (a file without it is version 1)",
}
BASELINE = FileFormat("baseline", BASELINE_VERSION, BASELINE_HISTORY)
REQUIRED = ("scenario", "comparable", "cells")
REMEDY = "regenerate it with --save-baseline"
SAMPLES = ("throughput", "normalised", "step_p50_ms", "cpu_s_per_sample", "loader_vs_decode",
           "decode_vs_reference", "rank_vs_reference")
OPTIONAL_SAMPLES = SAMPLES[3:]  # added later in version 1: written only where measured
FIGURE_SAMPLES = SAMPLES[4:]  # the gate's figures, each a figure of the cell's line (cells.jsonl)
# what must be equal for a baseline to be of this machine (analysis.compare); hostname and memory_gb are not
MACHINE_KEYS = ("cpu_model", "cpu_count", "cpu_affinity")


def machine_of(env: Environment) -> dict:
    """What a baseline records of the machine: env.machine and, where known, the cores the run was
    allowed."""
    return {**env.machine, **({"cpu_affinity": env.cpu_affinity} if env.cpu_affinity is not None else {})}


class BaselineError(Exception):
    """A baseline that cannot be used (missing, unreadable, wrong format, not comparable); the CLI
    exits 3."""


@dataclass
class BaselineCell:
    throughput: list[float] = field(default_factory=list)
    normalised: list[float] = field(default_factory=list)
    step_p50_ms: list[float] = field(default_factory=list)
    cpu_s_per_sample: list[float] = field(default_factory=list)  # loader + rank CPU per sample (added later)
    loader_vs_decode: list[float] = field(default_factory=list)  # the gate's figures (added later)
    decode_vs_reference: list[float] = field(default_factory=list)
    rank_vs_reference: list[float] = field(default_factory=list)
    error: str | None = None
    params: dict | None = None  # None: an older baseline that does not record them

    def samples(self, metric: str) -> list[float]:
        """The per-repeat values of one metric (one of SAMPLES)."""
        return getattr(self, metric)

    @classmethod
    def from_json(cls, obj: dict) -> BaselineCell:
        return cls(**{k: list(obj.get(k) or []) for k in SAMPLES}, error=obj.get("error"), params=obj.get("params"))

    def to_json(self) -> dict:
        out = {k: list(self.samples(k)) for k in SAMPLES if k not in OPTIONAL_SAMPLES or self.samples(k)}
        out["error"] = self.error
        if self.params is not None:
            out["params"] = self.params
        return out


@dataclass
class Baseline:
    scenario: str
    comparable: dict
    cells: dict[str, BaselineCell]
    created: str = ""
    machine: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    git: dict = field(default_factory=dict)
    probe: ProbeSeries = field(default_factory=ProbeSeries)

    @classmethod
    def from_run(cls, results: list[CellResult], env: Environment, probe: ProbeSeries, comparable: dict,
                 scenario: str, created: str | None = None) -> Baseline:
        """A run's results (one per cell and repeat) as a baseline. A ValueError (one line) when a
        cell has two results for one repeat or the probe lacks a repeat."""
        twice = duplicated_visit(results)
        if twice is not None:
            raise ValueError(f"cell {twice.cell} has two results for repeat {twice.repeat}")
        grouped: dict[str, dict[int, CellResult]] = {}
        for c in relative_to_probe(results, probe):
            grouped.setdefault(c.cell, {})[c.repeat] = c
        return cls(scenario=scenario, comparable=dict(comparable),
                   cells={cid: _cell(cid, reps) for cid, reps in grouped.items()},
                   created=created or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                   machine=machine_of(env), versions=dict(env.versions), git=dict(env.git),
                   probe=ProbeSeries.from_json(probe.to_json()))

    @classmethod
    def from_json(cls, obj, where: str = "the baseline") -> Baseline:
        if not isinstance(obj, dict) or "format" not in obj:
            raise BaselineError(f"{where} is not a dlbench baseline (no \"format\" key); {REMEDY}")
        named = str(obj["format"]).removeprefix("dlbench-baseline/")
        if not named.isdigit():
            raise BaselineError(f"{where} has format {obj['format']!r}, this harness reads {FORMAT!r}; {REMEDY}")
        try:  # the version (the format string's, or the schema key's), upgraded on read
            return BASELINE.load({VERSION_KEY: int(named), **obj}, where, lambda o: cls._read(o, where))
        except ResultsError as err:
            raise BaselineError(f"{err}; or {REMEDY}" if REMEDY not in str(err) else str(err)) from None

    @classmethod
    def _read(cls, obj: dict, where: str) -> Baseline:
        missing = [k for k in REQUIRED if not isinstance(obj.get(k), (dict, str))]
        if missing:
            raise BaselineError(f"{where} lacks {', '.join(missing)}; {REMEDY}")
        return cls(scenario=obj["scenario"], comparable=dict(obj["comparable"]),
                   cells={cid: BaselineCell.from_json(c) for cid, c in obj["cells"].items()},
                   created=obj.get("created", ""), machine=dict(obj.get("machine") or {}),
                   versions=dict(obj.get("versions") or {}), git=dict(obj.get("git") or {}),
                   probe=ProbeSeries.from_json(obj.get("probe")))

    def to_json(self) -> dict:
        return {"format": FORMAT, VERSION_KEY: BASELINE_VERSION, "created": self.created, "scenario": self.scenario,
                "comparable": dict(self.comparable), "machine": dict(self.machine),
                "versions": dict(self.versions), "git": dict(self.git), "probe": self.probe.to_json(),
                "cells": {cid: c.to_json() for cid, c in self.cells.items()}}

    def save(self, path: str | os.PathLike) -> None:
        """Write atomically (temporary file, then rename), creating parent directories."""
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            safewrite.write_text(path, json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n")
        except OSError as err:
            raise UsageError(f"--save-baseline {path}: cannot write ({err.strerror}); pass a writable "
                             f"path") from None

    @classmethod
    def load(cls, path: str | os.PathLike) -> Baseline:
        path = Path(path)
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise BaselineError(f"baseline {path} does not exist; create it with --save-baseline {path}") from None
        except OSError as err:
            raise BaselineError(f"baseline {path} cannot be read ({err.strerror}); check the path") from None
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as err:
            raise BaselineError(f"baseline {path} is not valid JSON (line {err.lineno}: {err.msg}); "
                                f"{REMEDY}") from None
        return cls.from_json(obj, f"baseline {path}")


def merge(parts: list[Baseline], where: str = "the runs") -> Baseline:
    """Several runs of one scenario on one machine as one Baseline: each cell's samples and the
    probe's figures concatenated in the order of `parts` (a cell errored in any part keeps the
    errors and no samples, as a cell errored in one repeat of a run). A BaselineError (one line)
    when the parts differ in scenario, in a `comparable` key, in the machine (MACHINE_KEYS) or in a
    cell's parameters, or when there are none."""
    if not parts:
        raise BaselineError(f"{where}: nothing to merge")
    first = parts[0]
    for i, part in enumerate(parts[1:], 2):
        if part.scenario != first.scenario:
            raise BaselineError(f"{where}: run {i} is of scenario {part.scenario}, run 1 of {first.scenario}")
        keys = sorted(k for k in set(first.comparable) | set(part.comparable)
                      if first.comparable.get(k) != part.comparable.get(k))
        keys += [k for k in MACHINE_KEYS if first.machine.get(k) != part.machine.get(k)]
        if keys:
            raise BaselineError(f"{where}: run {i} differs from run 1 in {', '.join(keys)}")
    cells: dict[str, BaselineCell] = {}
    for part in parts:
        for cid, cell in part.cells.items():
            into = cells.setdefault(cid, BaselineCell(params=cell.params))
            if into.params is not None and cell.params is not None and into.params != cell.params:
                raise BaselineError(f"{where}: cell {cid} has other strategy parameters in one run")
            into.params = into.params if into.params is not None else cell.params
            if cell.error or into.error:
                into.error = "; ".join(sorted({e for e in (into.error, cell.error) if e}))
                for key in SAMPLES:
                    into.samples(key).clear()
                continue
            for key in SAMPLES:
                into.samples(key).extend(cell.samples(key))
    cpu = [p.probe.ideal_cpu_samples_per_s for p in parts]
    probe = ProbeSeries([x for p in parts for x in p.probe.ideal_samples_per_s],
                        [x for p in parts for x in p.probe.memcpy_gb_s],
                        [x for xs in cpu for x in xs] if all(cpu) else [])  # only when every part has it
    commits = {p.git.get("commit") for p in parts}
    return Baseline(scenario=first.scenario, comparable=dict(first.comparable), cells=cells,
                    created=max(p.created for p in parts), machine=dict(first.machine),
                    versions=dict(first.versions), git=dict(first.git) if len(commits) == 1 else {}, probe=probe)


def _cell(cid: str, reps: dict[int, CellResult]) -> BaselineCell:
    ordered = [reps[r] for r in sorted(reps)]
    errors = sorted({c.error for c in ordered if c.error})
    cell = BaselineCell(error="; ".join(errors) or None,
                        params={a: dict(p) for a, p in sorted(ordered[0].params.items())})
    if errors:
        return cell
    for rep, c in zip(sorted(reps), ordered):
        if c.figures.throughput is None or c.figures.step_p50_ms is None:
            raise ValueError(f"cell {cid} repeat {rep} has no error and no throughput")
        if c.figures.vs_probe is None:
            raise ValueError(f"the probe has no ideal_samples_per_s for repeat {rep} (cell {cid})")
        cell.throughput.append(float(c.figures.throughput))
        cell.normalised.append(float(c.figures.vs_probe))
        cell.step_p50_ms.append(float(c.figures.step_p50_ms))
        f = c.figures
        if f.loader_cpu_s_per_sample is not None and f.rank_cpu_s_per_sample is not None:
            cell.cpu_s_per_sample.append(float(f.loader_cpu_s_per_sample + f.rank_cpu_s_per_sample))
        for key in FIGURE_SAMPLES:
            if f.get(key) is not None:
                cell.samples(key).append(float(f.get(key)))
    return cell
