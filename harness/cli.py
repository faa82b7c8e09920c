"""Command line: `python run_bench.py --scenario 4xV100` and friends. Thin: parse, then call the harness."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch.multiprocessing as mp

from harness import launch, report, results, scenario
from harness.errors import UsageError
from harness.matrix import expand, select

REPO = Path(__file__).resolve().parent.parent


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's default prints the whole usage
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="run_bench.py", description="Benchmark data-loading strategies under real DDP "
                      "training and print throughput, utilisation and memory tables.")
    p.add_argument("--scenario", help="a name from scenarios/ (see --list) or a path to a TOML file")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    knobs = p.add_argument_group("overrides of the scenario's settings")
    knobs.add_argument("--samples", type=int, help="dataset size")
    knobs.add_argument("--steps", type=int, help="measured steps per cell (after warm-up)")
    knobs.add_argument("--epochs", type=int, help="measure this many epochs' worth of steps instead")
    knobs.add_argument("--warmup-steps", type=int, help="steps run before the measured window")
    knobs.add_argument("--batch-size", type=int, help="samples per rank per step")
    knobs.add_argument("--workers", type=int, help="DataLoader workers per rank")
    knobs.add_argument("--world-size", type=int, help="number of ranks")
    knobs.add_argument("--workload", choices=scenario.WORKLOADS, help="pixels (decode JPEGs) or features")
    p.add_argument("--device", choices=("auto", "cuda", "emulated"), default="auto",
                   help="auto: real GPUs when there are enough for every rank, else emulate (default)")
    p.add_argument("--data-dir", type=Path, default=REPO / "data",
                   help="where generated datasets are kept and reused (default: data/)")
    p.add_argument("--out", type=Path, default=REPO / "results", help="where run directories go")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="import a module that registers extra strategies (repeatable)")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    cells = p.add_argument_group("selecting cells of the matrix")
    cells.add_argument("--only", action="append", default=[], metavar="AXIS=NAME[,NAME]",
                       help="run only cells with these strategies on that axis (repeatable)")
    cells.add_argument("--exclude", action="append", default=[], metavar="AXIS=NAME[,NAME]",
                       help="skip cells with these strategies on that axis (repeatable)")
    cells.add_argument("--dry-run", action="store_true", help="print the cells and exit without running")
    return p


def cmd_list() -> int:
    rows = scenario.describe_all()
    width = max(len(name) for name, _ in rows)
    for name, description in rows:
        print(f"{name:<{width}}  {description}")
    return 0


def cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
    from strategies import registry

    for module in args.plugin:
        try:
            registry.load_plugin(module)
        except ImportError as err:
            raise UsageError(f"--plugin {module}: cannot import ({err}); check the module name and PYTHONPATH")
    overrides = {k: getattr(args, k) for k in scenario.OVERRIDES}
    torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if torchrun:
        overrides["world_size"] = int(os.environ["WORLD_SIZE"])
    sc = scenario.load(args.scenario, overrides)
    device = launch.resolve_device(args.device, int(os.environ.get("LOCAL_WORLD_SIZE", sc.world_size)))
    cells = select(expand(sc), args.only, args.exclude)
    if args.dry_run:
        for i, cell in enumerate(cells, 1):
            print(f"{i:3d}  {cell.id}")
        print(f"{len(cells)} cells x {sc.world_size} ranks ({device})", file=sys.stderr)
        return 0
    rank = int(os.environ.get("RANK", 0))
    run_dir = results.new_run_dir(args.out, sc.name) if rank == 0 else args.out
    env, failed = None, False
    if rank == 0:
        env = results.environment(argv, {"mode": device, "accelerator": sc.accelerator.name,
                                         "world_size": sc.world_size})
        results.write_json(run_dir / "env.json", env)
        note = "real GPUs" if device == "cuda" else f"EMULATED {sc.accelerator.name} (no such GPUs here)"
        print(f"{sc.name}: {len(cells)} cells x {sc.world_size} ranks on {note}; results in {run_dir}",
              file=sys.stderr)
    config = launch.LaunchConfig(sc, cells, run_dir, args.data_dir, device, plugins=args.plugin,
                                 progress=not args.quiet)
    if torchrun:
        launch.rank_main(rank, int(os.environ.get("LOCAL_RANK", 0)), sc.world_size, config)
        if rank != 0:
            return 0
    else:
        try:
            launch.spawn(config)
        except mp.ProcessRaisedException as err:  # a bug in a rank: keep its traceback, keep the cells
            print(f"run_bench.py: a rank process failed; the cells measured before it are kept.\n{err}",
                  file=sys.stderr)
            failed = True
        except mp.ProcessExitedException as err:
            print(f"run_bench.py: a rank process died ({err}); the cells measured before it are kept.",
                  file=sys.stderr)
            failed = True
    cells_done = results.read_cells(run_dir)
    print(report.write_all(run_dir, cells_done, env))
    print(f"\nresults: {run_dir}", file=sys.stderr)
    broken = [c["cell"] for c in cells_done if not c.get("coverage", {}).get("ok", True)]
    if broken:
        print(f"run_bench.py: the sampler contract is broken in {len(broken)} cell(s): {'; '.join(broken)}",
              file=sys.stderr)
    return 1 if failed or broken else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    try:
        if args.list:
            return cmd_list()
        if not args.scenario:
            raise UsageError("give --scenario NAME (see --list) or --list")
        return cmd_run(args, argv)
    except UsageError as err:
        print(f"run_bench.py: error: {err}", file=sys.stderr)
        return 2
