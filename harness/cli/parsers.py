"""The command line's parsers: the only module that imports argparse (tests/test_imports.py checks
it). What they parse becomes a typed request in harness.cli.fromargs; nothing below the CLI sees
argparse's namespace."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from harness.checks.oom import command as oomcheck
from harness.checks.oom.inject import MODELS as OOM_MODELS
from harness.checks.predictions import capacity_command as check_capacity
from harness.checks.predictions import command as check_predictions
from harness.checks.remote import command as check_remote
from harness.checks.resume import command as check_resume
from harness.commands import history
from harness.config import scenariofields
from harness.config.launchconfig import ORDERS
from harness.data.importer import LAYOUTS
from harness.errors import EXIT_USAGE
from harness.gates import ci_command

REPO = Path(__file__).resolve().parent.parent.parent
GATE_METRICS = ("throughput", "cpu", "figures")  # harness.gates.baseline.metric_keys


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's default prints the whole usage
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="run_bench.py", description="Benchmark data-loading strategies under real DDP "
                      "training and print throughput, utilisation and memory tables. Also: "
                      "`run_bench.py report RUN_DIR` and `run_bench.py compare RUN_A RUN_B`.")
    p.add_argument("--scenario", help="a name from scenarios/ (see --list) or a path to a TOML file")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--self-test", action="store_true",
                   help="check measured throughput, stall and AU against a calibrated synthetic workload")
    knobs = p.add_argument_group("overrides of the scenario's settings")
    knobs.add_argument("--samples", type=int, help="dataset size")
    knobs.add_argument("--steps", type=int, help="measured steps per cell (after warm-up)")
    knobs.add_argument("--epochs", type=int, help="measure this many epochs' worth of steps instead")
    knobs.add_argument("--warmup-steps", type=int, help="steps run before the measured window")
    knobs.add_argument("--batch-size", type=int, help="samples per rank per step")
    knobs.add_argument("--workers", type=int, help="DataLoader workers per rank")
    knobs.add_argument("--world-size", type=int, help="number of ranks")
    knobs.add_argument("--workload", choices=scenariofields.WORKLOADS, help="pixels (decode JPEGs) or features")
    p.add_argument("--device", choices=("auto", "cuda", "emulated"), default="auto",
                   help="auto: real GPUs when there are enough for every rank, else emulate (default)")
    p.add_argument("--share-gpu", action="store_true",
                   help="run --world-size ranks on the visible GPU(s) over gloo (round-robin): the multi-rank CUDA "
                        "path on a one-GPU machine; without a GPU the ranks are emulated, with a note")
    p.add_argument("--data-dir", type=Path, default=REPO / "data",
                   help="where generated datasets are kept and reused (default: data/)")
    p.add_argument("--out", type=Path, default=REPO / "results", help="where run directories go")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="import a module that registers extra strategies (repeatable; trusted code: it runs "
                        "with your rights)")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    add_debug_option(p)
    cells = p.add_argument_group("selecting cells of the matrix")
    cells.add_argument("--only", action="append", default=[], metavar="AXIS=NAME[,NAME]",
                       help="run only cells with these strategies on that axis (repeatable)")
    cells.add_argument("--exclude", action="append", default=[], metavar="AXIS=NAME[,NAME]",
                       help="skip cells with these strategies on that axis (repeatable)")
    cells.add_argument("--dry-run", action="store_true", help="print the cells and exit without running")
    add_run_options(p)
    return p


def add_run_options(p: argparse.ArgumentParser) -> None:
    """The options of a run's life, its depth and its gate."""
    life = p.add_argument_group("faults, resuming and the data")
    life.add_argument("--resume", metavar="RUN_DIR", help="run only the cells missing from RUN_DIR/cells.jsonl "
                      "(same scenario and settings), then rebuild its report")
    life.add_argument("--verify-data", action="store_true",
                      help="check every byte of the datasets against their manifests (default: sizes and a "
                           "sampled checksum)")
    life.add_argument("--regenerate", action="store_true", help="write the datasets again (damaged data)")
    life.add_argument("--scale", choices=("full",), help="full: a CC3M-size dataset (3,318,333 samples) of "
                      "embeddings and captions, for --workload features")
    add_data_options(p.add_argument_group("your own data"))
    depth = p.add_argument_group("measurement depth")
    depth.add_argument("--cache-state", choices=("as-is", "warm", "cold"), default="as-is",
                       help="page cache before each cell: cold drops the dataset's files (posix_fadvise), "
                            "warm pre-reads them (default: as-is)")
    depth.add_argument("--decompose", action="store_true",
                       help="per cell, also measure compute alone and the pipeline warm and cold")
    depth.add_argument("--loader-only", action="store_true",
                       help="time each storage's read path alone (no training, no DataLoader), warm and cold, "
                            "against a RAM gather and the first article's per-row h5py reads; writes loader.jsonl")
    depth.add_argument("--profile", action="store_true",
                       help="torch.profiler traces per cell and rank under RUN_DIR/traces/")
    depth.add_argument("--check-predictions", action="store_true",
                       help="calibrate the target model on one configuration of the scenario, predict 8 that "
                            "each change one thing, measure them here; writes predictions.jsonl "
                            "(docs/prediction.md)")
    gate = p.add_argument_group("repeats, baselines and the CI gate")
    gate.add_argument("--repeats", type=int, default=1, help="run every cell N times, interleaved")
    gate.add_argument("--order", choices=ORDERS, default="random",
                      help="random (default): each repeat visits the cells in a fresh order drawn from a "
                           "recorded seed; fixed: the matrix's order every time")
    gate.add_argument("--budget", type=duration, metavar="DURATION", default=None,
                      help="after the planned repeats, keep visiting while an effect is still open and the "
                           "stopping rule has a look left (at most 4, spread from pass 2 to the last pass that "
                           "fits), until this much time (e.g. 300, 90s, 10m, 1h) has passed (default: the "
                           "scenario's [run] budget_s, e.g. 4xV100's; none with --repeats)")
    gate.add_argument("--family-alpha", type=alpha, default=None, metavar="ALPHA",
                      help="the effects' decisions: a wrong one among all of them in at most ALPHA of runs "
                           "(Bonferroni over the effects); default: each effect's decision wrong in at most 5%% "
                           "of runs, over all its looks")
    gate.add_argument("--quick", action="store_true",
                      help="one pass over the cells and no budget: a first look that decides no effect")
    gate.add_argument("--order-tolerance", type=order_tolerance, metavar="F", default=0.10,
                      help="how much less random than an ideal shuffle a cell's order may be (each order figure's "
                           "ratio to a shuffle's, or its training loss) before FASTEST names its cost and ROLL OUT "
                           "passes it over for a cell within it (0.10: 10%%; 1: never); docs/order-quality.md")
    gate.add_argument("--order-seed", type=int, metavar="N",
                      help="the seed of the random order (default: drawn, and recorded in env.json)")
    gate.add_argument("--save-baseline", type=Path, metavar="FILE", help="write this run as a baseline")
    gate.add_argument("--baseline", type=Path, metavar="FILE",
                      help="compare with a baseline; exit 1 on a significant regression, 3 if not comparable")
    gate.add_argument("--history", type=Path, metavar="FILE", default=history_default(),
                      help="add the run to this history store at its end (default: $DLBENCH_HISTORY, if set)")
    add_compare_options(gate)
    add_what_if_option(p)
    add_target_option(p)


def add_data_options(group) -> None:
    group.add_argument("--data", type=Path, metavar="PATH",
                       help="benchmark your own dataset: a folder img2dataset wrote (files, webdataset or "
                            "parquet output) or a folder of .jpg + same-named .txt captions; imported once per "
                            "storage into --data-dir (--samples N: only the first N samples)")
    group.add_argument("--data-format", choices=LAYOUTS, help="the layout of --data (default: detected)")
    group.add_argument("--strict-data", action="store_true",
                       help="a corrupt image in --data is an error (default: skipped and counted)")


def duration(text: str) -> float:
    """Seconds from "300", "90s", "10m" or "1h" (argparse turns the ValueError into one line, exit
    2)."""
    units = {"s": 1, "m": 60, "h": 3600}
    number, unit = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1)
    seconds = float(number) * unit
    if not seconds > 0:
        raise ValueError(text)
    return seconds


def alpha(text: str) -> float:
    """A significance level: a number strictly between 0 and 1 (argparse prints the message, exit
    2)."""
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be a number strictly between 0 and 1 (e.g. 0.05)")
    return value


def order_tolerance(text: str) -> float:
    """--order-tolerance: a fraction in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction from 0 to 1 (0.10: 10%)")
    return value


def min_effect(text: str) -> float:
    """The smallest relative change that counts: a finite number >= 0."""
    value = float(text)
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a relative change >= 0 (e.g. 0.05 for 5%)")
    return value


def add_debug_option(parser) -> None:
    parser.add_argument("--debug", action="store_true",
                        help="on an error, print its traceback instead of one line (same exit code)")


def add_compare_options(group) -> None:
    group.add_argument("--gate-metric", choices=GATE_METRICS, default="throughput",
                       help="throughput (default): samples/s normalised by the machine probe; cpu: the loader's and "
                            "the rank's CPU seconds per sample (steadier on a shared runner); figures: three "
                            "figures in which the machine's load cancels (the loader over its decode stage, decode "
                            "and the rank over reference work timed in the same visit), each at its own minimum "
                            "effect (docs/ci-gate.md)")
    group.add_argument("--raw", action="store_true",
                       help="compare raw samples/s instead of samples/s relative to the machine probe")
    group.add_argument("--min-effect", type=min_effect, default=0.05,
                       help="smallest relative change that counts, >= 0 (0.05: 5%%); with --gate-metric figures "
                            "each figure has its own")
    group.add_argument("--alpha", type=alpha, default=0.05,
                       help="significance level of the rank test, in (0, 1) (0.05)")
    group.add_argument("--strict", action="store_true",
                       help="a cell with too few repeats for the rank test to reach alpha (verdict "
                            "inconclusive) fails the gate (exit 1) instead of a warning")


def add_what_if_option(parser) -> None:
    parser.add_argument("--what-if-cores", type=float, metavar="N",
                        help="add a modelled column: samples/s predicted with N loader cores per rank "
                             "(world size x min(device rate, N / (loader + rank CPU s per sample), workers / "
                             "loader CPU s per sample))")


def add_target_option(parser) -> None:
    parser.add_argument("--target", type=Path, metavar="FILE",
                        help="a TOML file with a [target] table: the hardware to predict each cell on "
                             "(docs/prediction.md); default: the scenario's [target], if any")


def define_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path)
    p.add_argument("--with-1x", type=Path, metavar="RUN_DIR",
                   help="a one-rank run of the same matrix, for the scaling-efficiency table")
    add_what_if_option(p)
    add_target_option(p)


def define_compare(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_a", type=Path)
    p.add_argument("run_b", type=Path)
    p.add_argument("--markdown", action="store_true", help="print markdown (for a pull-request comment)")
    add_compare_options(p)


def _paths(p: argparse.ArgumentParser, d) -> None:
    p.add_argument("--data-dir", type=Path, default=d.data_dir, help=f"where datasets are kept ({d.data_dir})")
    p.add_argument("--out", type=Path, default=d.out, help=f"where the run directory goes ({d.out})")


def define_check_predictions(p: argparse.ArgumentParser) -> None:
    d = check_predictions.Request
    p.add_argument("--scenario", help="a name from scenarios/ (a pixels scenario) or a path to a TOML file")
    p.add_argument("--analyse", type=Path, metavar="RUN_DIR", help="the table again from a check's run directory")
    _paths(p, d)
    p.add_argument("--rounds", type=int, default=d.rounds, help=f"interleaved passes over the cases ({d.rounds})")
    p.add_argument("--steps", type=int, default=d.steps, help=f"measured steps per cell, >= 10 ({d.steps})")
    p.add_argument("--case", dest="cases", action="append", default=[], help="run only this case (repeatable)")
    p.add_argument("--plugin", dest="plugins", action="append", default=[], metavar="MODULE",
                   help="import a module that registers extra strategies (repeatable)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def define_check_capacity(p: argparse.ArgumentParser) -> None:
    d = check_capacity.Request
    p.add_argument("--scenario", required=True, help="a name from scenarios/ or a path to a TOML file")
    _paths(p, d)
    p.add_argument("--steps", type=int, default=d.steps, help=f"measured steps per cell ({d.steps})")


def define_check_remote(p: argparse.ArgumentParser) -> None:
    d = check_remote.CheckRemoteRequest
    p.add_argument("--bandwidths", type=float, nargs="+", default=list(d.bandwidths), metavar="MB_S",
                   help="shaped settings in MB/s, after the unshaped calibration "
                        f"({' '.join(f'{b:g}' for b in d.bandwidths)})")
    p.add_argument("--seconds", type=float, default=d.seconds,
                   help=f"measured seconds per case and setting ({d.seconds:g})")
    p.add_argument("--rounds", type=int, default=d.rounds,
                   help=f"sweeps over every setting, medians reported ({d.rounds})")
    p.add_argument("--samples", type=int, default=d.samples, help=f"the dataset's samples ({d.samples})")


def define_check_resume(p: argparse.ArgumentParser) -> None:
    d = check_resume.CheckResumeRequest
    p.add_argument("--scenario", required=True, help="a name from scenarios/ or a path to a TOML file")
    _paths(p, d)
    p.add_argument("--loader", dest="loaders", action="append", default=[], metavar="NAME",
                   help="only this loader of the scenario (repeatable; litdata: litdata's own loader)")
    p.add_argument("--stop", type=int, default=d.stop, help="batches read before the stop (0: half the epoch)")
    p.add_argument("--in-process", action="store_true", help="restart in this process, not a fresh one")
    p.add_argument("--samples", type=int, help="the dataset's samples (default: the scenario's)")
    p.add_argument("--workload", choices=scenariofields.WORKLOADS, help="the fields read (default: the scenario's)")


def define_target_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path)
    p.add_argument("--target", type=Path, metavar="FILE",
                   help="a TOML file with a [target] table (default: the run's scenario's [target], if any)")


def define_oomcheck(p: argparse.ArgumentParser) -> None:
    p.add_argument("--real", action="store_true", help="a real CUDA OOM (needs a GPU)")
    p.add_argument("--model", dest="models", choices=OOM_MODELS, action="append", default=[],
                   help="only this model (repeatable)")
    p.add_argument("--timeout", type=float, default=oomcheck.Request.timeout,
                   help="seconds a case may take before it is a hang")


def define_ab_gate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--parent", type=Path, required=True, help="the parent commit's tree (a git worktree)")
    p.add_argument("--current", type=Path, default=Path("."), help="this commit's tree (.)")
    p.add_argument("--runs", type=int, default=6, help="single-repeat runs per side, interleaved (6)")
    p.add_argument("--scenario", default="ci", help="the scenario both trees run (ci)")
    p.add_argument("--data-dir", type=Path, default=REPO / "data", help="one data directory for both trees")
    p.add_argument("--out", type=Path, default=REPO / "results" / "ci-gate-ab", help="where the runs go")
    p.add_argument("--parent-label", default="HEAD^", help="the parent's name in the lines printed")
    p.add_argument("--min-effect", type=min_effect, default=0.15,
                   help="smallest rise that counts (0.15); with --gate-metric figures each figure has its own")
    p.add_argument("--alpha", type=alpha, default=0.05, help="significance level over all cells (0.05)")
    p.add_argument("--gate-metric", choices=GATE_METRICS, default="figures",
                   help="what is compared (figures: the loader over its decode stage, decode and the rank over "
                        "reference work; as for run_bench.py --gate-metric)")


def define_gate_precheck(p: argparse.ArgumentParser) -> None:
    p.add_argument("baseline", type=Path, help="a baseline file (--save-baseline)")


def history_default(fallback: Path | None = None) -> Path | None:
    """The history store when --history is not given: $DLBENCH_HISTORY, else `fallback`."""
    return Path(os.environ["DLBENCH_HISTORY"]) if os.environ.get("DLBENCH_HISTORY") else fallback


def define_history(p: argparse.ArgumentParser) -> None:
    d = history.HistoryRequest
    p.add_argument("action", choices=history.ACTIONS, help="add RUN_DIR... | list | show CELL|AXIS | compare "
                   "COMMIT_A COMMIT_B | gate RUN_DIR | steps | html OUT_DIR")
    p.add_argument("args", nargs="*", help="the action's arguments")
    p.add_argument("--history", dest="store", type=Path, default=history_default(REPO / "results" / "history.sqlite"),
                   metavar="FILE", help="the store ($DLBENCH_HISTORY, else results/history.sqlite)")
    p.add_argument("--branch", default=d.branch, help="add: the runs' branch; gate: compare with this branch's runs")
    p.add_argument("--scenario", help="only this scenario (show, compare, steps)")
    p.add_argument("--figure", choices=("cpu", "throughput", "au", "stages", "stages/decode"), default=d.figure,
                   help="gate: stages/decode (default: the loader's timed stages over its decode stage), stages, "
                        "cpu or throughput; show, compare, steps: cpu (default), throughput, au")
    p.add_argument("--last", type=int, default=d.last, help=f"gate: the last K comparable runs ({d.last})")
    p.add_argument("--min-effect", type=min_effect, default=d.min_effect, help=f"gate: ({d.min_effect})")
    p.add_argument("--alpha", type=alpha, default=d.alpha, help=f"gate: over all cells ({d.alpha})")


def ci_cache_default() -> Path | None:
    """The CI cache directory when --cache is not given: $DLBENCH_CI_CACHE (None when unset or
    empty)."""
    return Path(os.environ["DLBENCH_CI_CACHE"]) if os.environ.get("DLBENCH_CI_CACHE") else None


def define_ci_history(p: argparse.ArgumentParser) -> None:
    d = ci_command.CiHistoryRequest
    p.add_argument("--gate-exit", type=int, choices=range(256), required=True, metavar="N",
                   help="the A/B or baseline gate's exit code (scripts/ci_gate.sh's)")
    p.add_argument("--cache", type=Path, default=ci_cache_default(), metavar="DIR",
                   help="the directory the CI keeps between jobs ($DLBENCH_CI_CACHE; none: the gate stands alone)")
    p.add_argument("--job-history", type=Path, default=history_default(REPO / "results" / "ci-history.sqlite"),
                   metavar="FILE", help="this job's history store ($DLBENCH_HISTORY, else results/ci-history.sqlite)")
    p.add_argument("--commit", default=d.commit, help="the commit under test (default: this checkout's HEAD)")
    p.add_argument("--last", type=int, default=d.last, help=f"the last K comparable runs ({d.last})")
    p.add_argument("--min-effect", type=min_effect, default=d.min_effect, help=f"({d.min_effect})")
    p.add_argument("--alpha", type=alpha, default=d.alpha, help=f"over all cells ({d.alpha})")


DEFINE = {  # name: (what its parser adds, its description): every command named by its first word
    "report": (define_report, "Rebuild the tables, summary.csv, report.md and plots of a run from its cells.jsonl "
               "alone."),
    "compare": (define_compare, "Compare run B with run A, cell by cell."),
    "history": (define_history, "the history store: every run per commit and machine, its queries, a gate against "
                "the last comparable runs, change points, a static HTML dashboard (docs/history.md)"),
    "ab-gate": (define_ab_gate, "this commit's tree against its parent's, single-repeat runs interleaved on this "
                "machine, compared on the gate metric; exit 1 only on a significant regression"),
    "ci-history": (define_ci_history, "after the CI gate: the history gate against the history a CI cache keeps "
                   "between jobs, both verdicts and which binds in one line, the job's exit code (docs/ci-gate.md)"),
    "gate-precheck": (define_gate_precheck, "0 when a baseline may be of this machine (CPU model, count, cores "
                      "allowed), else 3"),
    "check-predictions": (define_check_predictions, "the target model (nothing fitted) calibrated on one "
                          "configuration of a scenario (and at 2 ranks, and on 1 CPU), the configurations that each "
                          "change one thing and the 1-CPU pairings predicted, each with its 90% interval, and "
                          "measured here; writes predictions.jsonl"),
    "check-capacity": (define_check_capacity, "how many accelerators this host keeps at AU >= 90%: runs at 1, 2 "
                       "and 4 ranks per workload against the model from the 1-rank calibration and the ranks' wait "
                       "measured at 2; exit 1 where they differ; "
                       "writes capacity.jsonl"),
    "check-remote": (define_check_remote, "the target model's storage bounds against the project's own shaped "
                     "store (root): one reading process per case, an unshaped calibration and each shaped "
                     "bandwidth, predicted and measured"),
    "check-resume": (define_check_resume, "what a restart costs per loader and storage: time to the first batch "
                     "(page cache warm and cold) and the samples a mid-epoch resume repeats or drops, from the "
                     "loader's own state, the harness's position or nothing; writes resume.jsonl"),
    "target-report": (define_target_report, "the per-stage table, plots/stages.png and, with a target, each "
                      "cell's prediction there and the configuration to use, from a run directory alone"),
    "oomcheck": (define_oomcheck, "an OOM on one rank of a 2-rank DDP run must neither hang nor crash the other"),
}


def subcommand_parser(name: str) -> argparse.ArgumentParser:
    """`run_bench.py NAME ...` for the commands of DEFINE."""
    define, description = DEFINE[name]
    p = OneLineParser(prog=f"run_bench.py {name}", description=description)
    define(p)
    add_debug_option(p)
    return p
