"""A bench request settled once, before anything runs (the main run's and --loader-only's common
start): the scenario with the command line's overrides and data, its cells, the device and the
target; --dry-run lists the cells; an imported source is scanned."""
from __future__ import annotations

import sys
from pathlib import Path

from harness.config import datasetup, scenario, target
from harness.config.datasetup import CC3M_SAMPLES, full_scale, with_source
from harness.config.matrix import Cell, expand, runnable, select
from harness.config.request import BenchRequest
from harness.results import rundir
from harness.run import launch

Settled = tuple[scenario.Scenario, list[Cell], str, "target.Target | None"]


def prepare(request: BenchRequest) -> Settled | None:
    """`settle`, then the cells listed (--dry-run: None, nothing more to do) or the source
    scanned."""
    sc, cells, device, run_target = settle(request)
    if request.dry_run:
        for i, cell in enumerate(cells, 1):
            print(f"{i:3d}  {cell.id}")
        print(f"{len(cells)} cells x {request.repeats} repeats x {sc.world_size} ranks ({device})", file=sys.stderr)
        return None
    datasetup.scan_source(sc, request.data_dir, not request.quiet, request.overrides)  # an imported source
    return sc, cells, device, run_target


def local_ranks(request: BenchRequest, sc: scenario.Scenario) -> int:
    """The ranks on this node: torchrun's, else every rank of the scenario (spawned here)."""
    return request.torchrun.local_world_size if request.torchrun else sc.world_size


def settle(request: BenchRequest) -> tuple[scenario.Scenario, list[Cell], str, target.Target | None]:
    """(the scenario, its cells, the device, the target), each settled once from the request; a
    mistake in any of them, or an output path that cannot be written, stops here, before anything
    runs."""
    r = request
    overrides = r.overrides.given()
    if r.data.scale == "full" and r.overrides.samples is None and r.data.path is None:
        overrides["samples"] = CC3M_SAMPLES
    if r.torchrun:
        overrides["world_size"] = r.torchrun.world_size
    sc = with_source(scenario.load(r.scenario, overrides), r.data, r.overrides.samples)  # --data, [dataset] source
    if r.data.scale == "full":
        sc = full_scale(sc)
    run_target = target.of_scenario(sc, r.target)  # a mistake in it stops here, before anything runs
    device = launch.resolve_device(r.device, local_ranks(r, sc), r.torchrun, share_gpu=r.share_gpu)
    shipped = sc.path is not None and Path(sc.path).resolve().parent == scenario.SCENARIO_DIR.resolve()
    cells = select(expand(sc), list(r.only), list(r.exclude), check=not shipped)
    if shipped:  # a scenario of the project's runs the cells this machine can, and says what it left out
        cells, notes = runnable(cells)
        for note in notes:
            print(f"{sc.name}: {note} (the other cells run)", file=sys.stderr)
    rundir.check_writable_dir(r.out, "--out")  # the output paths, before anything is measured
    if r.gate.save_baseline:
        rundir.check_writable_file(r.gate.save_baseline, "--save-baseline")
    return sc, cells, device, run_target
