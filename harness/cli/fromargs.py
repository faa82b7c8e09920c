"""From what the parsers read to one frozen request per command (harness.config.request, or the
command's own `Request`), settled once: the order seed, the resume directory and the command line
it replays, the torchrun identity. Imports no argparse: it reads the parsed options by name."""
from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path

from harness.checks.predictions import command as check_predictions
from harness.config import scenario
from harness.config.request import BenchRequest, DataOptions, GateOptions, Overrides, Torchrun
from harness.errors import UsageError
from harness.run import resume


def check_what_if(value: float | None) -> None:
    if value is not None and not value > 0:
        raise UsageError(f"--what-if-cores = {value:g} must be a positive number of cores per rank")


def bench_request(ns, argv: list[str], resume_dir: Path | None) -> BenchRequest:
    """The run's request: every option typed, the order seed and the torchrun identity settled."""
    if ns.repeats < 1:
        raise UsageError(f"--repeats = {ns.repeats} must be a positive integer")
    check_what_if(ns.what_if_cores)
    if ns.quick and (ns.budget is not None or ns.repeats > 1):
        raise UsageError("--quick is one pass with no budget: drop --budget and --repeats, or drop --quick")
    seed = ns.order_seed
    if seed is None and resume_dir is not None:
        seed = resume.recorded_order_seed(resume_dir)
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little")  # drawn, then recorded in env.json
    return BenchRequest(
        scenario=ns.scenario, argv=tuple(argv), order_seed=seed,
        overrides=Overrides(**{k: getattr(ns, k) for k in scenario.OVERRIDES}),
        data=DataOptions(ns.data, ns.data_format, ns.strict_data, ns.scale),
        gate=GateOptions(ns.baseline, ns.save_baseline, ns.gate_metric, ns.raw, ns.min_effect, ns.alpha, ns.strict,
                          ns.family_alpha),
        device=ns.device, share_gpu=ns.share_gpu, data_dir=ns.data_dir, out=ns.out, plugins=tuple(ns.plugin),
        quiet=ns.quiet,
        only=tuple(ns.only), exclude=tuple(ns.exclude), dry_run=ns.dry_run, resume=resume_dir,
        verify_data=ns.verify_data, regenerate=ns.regenerate, cache_state=ns.cache_state, decompose=ns.decompose,
        loader_only=ns.loader_only, profile=ns.profile, repeats=ns.repeats, order=ns.order, budget_s=ns.budget,
        quick=ns.quick, order_tolerance=ns.order_tolerance,
        what_if_cores=ns.what_if_cores, target=ns.target, torchrun=Torchrun.from_env())


def request_of(cls, ns):
    """A command's Request from its parsed options: each field from the option of that name, lists
    as tuples."""
    given = vars(ns)
    return cls(**{f.name: tuple(given[f.name]) if isinstance(given[f.name], list) else given[f.name]
                  for f in fields(cls) if f.name in given})


def check_predictions_request_of(request: BenchRequest) -> check_predictions.Request:
    """`run_bench.py --scenario NAME --check-predictions [--steps N --samples N ...]`: what passes
    through."""
    o = request.overrides
    return check_predictions.Request(
        scenario=request.scenario, data_dir=request.data_dir, out=request.out, plugins=request.plugins,
        quiet=request.quiet, steps=o.steps if o.steps is not None else check_predictions.Request.steps,
        samples=o.samples, batch_size=o.batch_size, workers=o.workers, warmup_steps=o.warmup_steps,
        workload=o.workload, world_size=o.world_size, epochs=o.epochs)


def resume_argv(argv: list[str], parser) -> tuple[Path, list[str]]:
    """(RUN_DIR, the command line to run): the recorded one when only free options were given; a
    whole command line (with --scenario) as given (its settings are checked against the run's
    later); other options without --scenario must not change the recorded command line: a
    UsageError names each option that differs."""
    rest, run_dir, i = [], None, 0
    while i < len(argv):
        if argv[i] == "--resume" and i + 1 < len(argv):
            run_dir, i = Path(argv[i + 1]), i + 2
            continue
        if argv[i].startswith("--resume="):
            run_dir = Path(argv[i].split("=", 1)[1])
        else:
            rest.append(argv[i])
        i += 1
    if run_dir is None:
        raise UsageError("--resume needs a run directory: --resume results/<run>")
    recorded = list(resume.read_run_env(run_dir).argv)
    if any(a not in resume.FREE_OPTIONS for a in rest):
        if any(a == "--scenario" or a.startswith("--scenario=") for a in rest):
            return run_dir, rest
        _same_options(run_dir, parser, recorded, rest)
    return run_dir, recorded + [a for a in rest if a not in recorded]


def _same_options(run_dir: Path, parser, recorded: list[str], given: list[str]) -> None:
    """A UsageError naming the options in ``given`` that change the run's recorded command line."""
    before, after = parser.parse_args(recorded), parser.parse_args(recorded + given)
    free = {o.lstrip("-").replace("-", "_") for o in resume.FREE_OPTIONS}
    differ = [k for k in vars(after) if k not in free and getattr(before, k, None) != getattr(after, k)]
    if differ:
        what = "; ".join(f"--{k.replace('_', '-')} {_shown(getattr(after, k))} (the run's: "
                         f"{_shown(getattr(before, k, None))})" for k in differ)
        raise UsageError(f"--resume {run_dir}: these options differ from the run's: {what}; resume with just "
                         f"--resume {run_dir} (free to add: {', '.join(sorted(resume.FREE_OPTIONS))}), or start "
                         f"a new run with them")


def _shown(value) -> str:
    if value is None:
        return "not given, the scenario's"
    if isinstance(value, list):
        return " ".join(map(str, value)) or "none"
    return str(value)


