"""A user's mistakes: each is one line on stderr naming the file, flag or field and the remedy, exit code 2, no
traceback, and caught before anything is measured (a strategy's value never fails inside a rank, where it
would read as a failed cell, exit 1, a regression to CI).

Each case runs twice: in this process through harness.cli.main (the unit layer) and as a real
`python run_bench.py` process (slow). The cases that need a real process only (plugins: they change the
registry of the process that imports them) run as a process alone.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_bench
from scenarios_for_tests import scenario_toml, write_scenario

from harness import cli
from harness.data import materialise, space
from harness.data.generator import DatasetSpec
from harness.errors import UsageError

TRAINING = {"batch_size": 4, "steps": 2}
TINY = scenario_toml(training=TRAINING)


def scenario(tmp_path: Path, matrix: dict | None = None, extra: str = "", name: str = "s.toml") -> Path:
    return write_scenario(tmp_path / name, matrix, training=TRAINING, tables=extra)


def dynamic_min_batch(tmp_path):
    return ["--scenario", scenario(tmp_path, {"batching": [{"name": "dynamic", "min_batch": 100}]}), "--dry-run"]


def adaptive_max_batch(tmp_path):
    return ["--scenario", scenario(tmp_path, {"batching": [{"name": "adaptive", "max_batch": 2}]}), "--dry-run"]


def adaptive_min_batch_from_flag(tmp_path):
    return ["--scenario", scenario(tmp_path, {"batching": [{"name": "adaptive", "min_batch": 4}]}),
            "--batch-size", "2", "--dry-run"]


def entry_without_name(tmp_path):
    return ["--scenario", scenario(tmp_path, {"batching": [{"min_batch": 100}]}), "--dry-run"]


def not_utf8(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes('description = "café"\n'.encode("latin-1") + TINY.encode())
    return ["--scenario", path, "--dry-run"]


def a_directory(tmp_path):
    return ["--scenario", tmp_path, "--dry-run"]


def unknown_table(tmp_path):
    return ["--scenario", scenario(tmp_path, extra="[bogus]\nx = 1\n"), "--dry-run"]


def steps_beyond_int64(tmp_path):
    return ["--scenario", scenario(tmp_path), "--steps", str(2**64), "--dry-run"]


def steps_beyond_int64_in_file(tmp_path):
    path = write_scenario(tmp_path / "big.toml", training={**TRAINING, "steps": 9223372036854775807000})
    return ["--scenario", path, "--dry-run"]


def batch_beyond_share(tmp_path):
    return ["--scenario", scenario(tmp_path), "--batch-size", "100000", "--dry-run"]


def alpha_above_one(tmp_path):
    return ["compare", tmp_path / "a", tmp_path / "b", "--alpha", "1.5"]


def negative_min_effect(tmp_path):
    return ["compare", tmp_path / "a", tmp_path / "b", "--min-effect", "-1"]


def alpha_of_a_run(tmp_path):
    return ["--scenario", scenario(tmp_path), "--alpha", "0", "--dry-run"]


def save_baseline_to_a_directory(tmp_path):
    return ["--scenario", scenario(tmp_path), "--save-baseline", tmp_path, "--dry-run"]


def save_baseline_under_a_file(tmp_path):
    (tmp_path / "file").write_text("")
    return ["--scenario", scenario(tmp_path), "--save-baseline", tmp_path / "file" / "b.json", "--dry-run"]


def out_under_a_file(tmp_path):
    (tmp_path / "file").write_text("")
    return ["--scenario", scenario(tmp_path), "--out", tmp_path / "file" / "results", "--dry-run"]


def samples_beyond_a_source(tmp_path):
    from PIL import Image

    src = tmp_path / "src"
    src.mkdir()
    for i in range(4):
        Image.new("RGB", (40 + i, 30), (i * 40, 80, 120)).save(src / f"{i:03d}.jpg", quality=90)
        (src / f"{i:03d}.txt").write_text(f"a picture number {i}")
    return ["--scenario", scenario(tmp_path, extra="").as_posix(), "--data", src, "--samples", "100",
            "--world-size", "1", "--data-dir", tmp_path / "data", "--out", tmp_path / "out", "--quiet"]


CASES = {
    dynamic_min_batch: "s.toml: matrix.batching: batching strategy 'dynamic': min_batch = 100 exceeds max_batch = 16",
    adaptive_max_batch: "batching strategy 'adaptive': max_batch = 2 is below the starting batch_size 4",
    adaptive_min_batch_from_flag: "min_batch = 4 exceeds the starting batch_size 2",
    entry_without_name: "[matrix] batching entry 1 { min_batch = 100 } has no name",
    not_utf8: "latin1.toml: not UTF-8 text (byte 0xe9",
    a_directory: "is a directory, not a scenario file",
    unknown_table: "unknown section or field 'bogus'",
    steps_beyond_int64: f"--steps = {2**64} is beyond 2^63 - 1",
    steps_beyond_int64_in_file: "[training] steps = 9223372036854775807000 is beyond 2^63 - 1",
    batch_beyond_share: "--batch-size = 100000 exceeds each rank's share of the dataset (32 samples: 64 over 2 ranks)",
    alpha_above_one: "argument --alpha: 1.5 must be a number strictly between 0 and 1",
    negative_min_effect: "argument --min-effect: -1 must be a relative change >= 0",
    alpha_of_a_run: "argument --alpha: 0 must be a number strictly between 0 and 1",
    save_baseline_to_a_directory: "is a directory; pass a file path",
    save_baseline_under_a_file: ("--save-baseline ", "/file/b.json: ", "is a file, not a directory"),
    out_under_a_file: ("--out ", "/file/results: ", "is a file, not a directory; pass a directory"),
    samples_beyond_a_source: "--samples = 100 asks for more samples than data source",
}


def one_line(code: int, err: str, message: str | tuple[str, ...]) -> None:
    assert code == 2, err
    assert "Traceback" not in err, err
    (line,) = err.strip().splitlines()  # exactly one line
    assert line.startswith("run_bench.py"), line
    for part in (message,) if isinstance(message, str) else message:
        assert part in line, line
    assert "internal error" not in line and "regression" not in line


def run_cli(args) -> int:
    """harness.cli.main in this process; argparse's own errors exit (SystemExit) with their code."""
    try:
        return cli.main([str(a) for a in args])
    except SystemExit as exit_:
        return exit_.code


@pytest.mark.parametrize("make", list(CASES), ids=[f.__name__ for f in CASES])
def test_a_mistake_is_one_line_exit_2(tmp_path, capsys, make):
    code = run_cli(make(tmp_path))
    one_line(code, capsys.readouterr().err, CASES[make])


@pytest.mark.slow  # runs run_bench.py as a process
@pytest.mark.parametrize("make", list(CASES), ids=[f.__name__ for f in CASES])
def test_a_mistake_is_one_line_exit_2_in_a_process(tmp_path, make):
    proc = run_bench(*map(str, make(tmp_path)))
    one_line(proc.returncode, proc.stderr, CASES[make])


def test_the_scenario_keeps_accelerators_and_target_tables_raw(tmp_path):
    from harness.config import scenario as sc

    path = scenario(tmp_path, extra='[accelerators.MyGPU]\nresnet50_img_per_s = 100\nmemory_gb = 24\n'
                                    'fp16_tflops = 50\n[target]\nsamples_per_s = 900\nmetric = "throughput"\n')
    loaded = sc.load(str(path))
    assert loaded.accelerators_extra == {"MyGPU": {"resnet50_img_per_s": 100, "memory_gb": 24, "fp16_tflops": 50}}
    assert loaded.target == {"samples_per_s": 900, "metric": "throughput"}
    plain = sc.load(str(scenario(tmp_path, name="plain.toml")))
    assert plain.accelerators_extra == {} and plain.target is None
    with pytest.raises(UsageError, match=r"\[accelerators\] must hold tables"):
        bad = tmp_path / "bad.toml"
        bad.write_text("accelerators = 3\n" + TINY)
        sc.load(str(bad))


def test_the_training_check_uses_the_overridden_batch_size(tmp_path):
    from harness.config import scenario as sc

    path = scenario(tmp_path, {"batching": [{"name": "dynamic", "min_batch": 100}]})
    assert sc.load(str(path), {"batch_size": 32}).matrix["batching"][0].name == "dynamic"  # 4 x 32 >= 100
    with pytest.raises(UsageError, match="batch_size from --batch-size"):
        sc.load(str(path), {"batch_size": 8})


# --- plugins (a real process each: importing a plugin changes the registry of its process) -----------------

PLUGINS = {
    "bad_syntax": ("def f(:\n", "--plugin bad_syntax: bad_syntax has a syntax error: invalid syntax"),
    "raises": ("raise RuntimeError('boom')\n", "--plugin raises: raises failed to import: RuntimeError: boom"),
    "needs_dep": ("import no_such_dependency_x\n",
                  "--plugin needs_dep: needs_dep failed to import: ModuleNotFoundError: No module named"),
    "dup": ("from strategies.registry import register\nfrom strategies.protocols import BatchingBase\n"
            "@register('batching', 'fixed')\nclass Mine(BatchingBase):\n"
            "    def batch_sampler(self, s, b, **c):\n        return []\n",
            "--plugin dup: dup failed to import: DuplicateStrategy: batching strategy 'fixed' is already "
            "registered (by strategies.batching.fixed.FixedBatching)"),
    "no.such.module": (None, "--plugin no.such.module: module 'no.such.module' not found"),
}


@pytest.mark.slow  # runs run_bench.py as a process
@pytest.mark.parametrize("module", list(PLUGINS))
def test_a_broken_plugin_names_plugin_and_the_module(tmp_path, module, monkeypatch):
    source, message = PLUGINS[module]
    if source is not None:
        (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    proc = run_bench("--scenario", str(scenario(tmp_path)), "--plugin", module, "--dry-run")
    one_line(proc.returncode, proc.stderr, message)


@pytest.mark.slow  # runs run_bench.py as a process
def test_a_plugin_may_replace_a_strategy_on_purpose(tmp_path, monkeypatch):
    (tmp_path / "replaces.py").write_text(
        "from strategies.registry import register\nfrom strategies.batching.fixed import FixedBatching\n"
        "@register('batching', 'fixed', override=True)\nclass MyFixed(FixedBatching):\n    pass\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    proc = run_bench("--scenario", str(scenario(tmp_path)), "--plugin", "replaces", "--dry-run")
    assert proc.returncode == 0, proc.stderr


def test_registering_a_taken_name_is_an_error_unless_it_overrides(monkeypatch):
    from strategies import registry

    registry.load_builtins()
    monkeypatch.setattr(registry, "_REGISTRY", {a: dict(d) for a, d in registry._REGISTRY.items()})

    class Other:
        pass

    with pytest.raises(registry.DuplicateStrategy, match="override=True"):
        registry.register("sampler", "default")(Other)
    registry.register("sampler", "default", override=True)(Other)
    assert registry.get("sampler", "default") is Other
    registry.register("sampler", "default")(Other)  # the same factory again (a module imported twice)


# --- a full or read-only data directory ---------------------------------------------------------------------

def test_the_space_check_names_data_dir_and_the_bytes(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(space, "free_bytes", lambda path: 1000)
    code = cli.main(["--scenario", str(scenario(tmp_path, {"storage": ["raw", "mmap"]})), "--data-dir",
                     str(tmp_path / "data"), "--out", str(tmp_path / "out"), "--quiet"])
    one_line(code, capsys.readouterr().err, f"--data-dir {tmp_path / 'data'}: the datasets to write need about ")
    assert not (tmp_path / "out").exists()  # no run directory: the check comes before it
    assert not list((tmp_path / "data").glob("*-*"))  # nothing written


def test_the_estimate_is_near_what_a_storage_takes(tmp_path):
    spec = DatasetSpec(samples=96, profile="tiny")
    for name in ("raw", "mmap"):
        path = materialise.materialise(spec, name, tmp_path, progress=False)
        written = sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())
        estimated = materialise.pending(spec, [(name, {})], tmp_path, regenerate=True)[0][1]
        assert written <= estimated <= written + 2 * space.SLACK, (name, written, estimated)
    assert materialise.pending(spec, [("raw", {}), ("mmap", {})], tmp_path) == []  # both written


def test_a_write_that_runs_out_of_room_is_one_usage_error_and_leaves_nothing(tmp_path, monkeypatch):
    from strategies.storage.raw import RawStorage

    def full(self, samples, path, count):
        (Path(path) / "part").write_bytes(b"x")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(RawStorage, "write", full)
    with pytest.raises(UsageError, match=r"--data-dir .*: writing the raw dataset failed \(No space left"):
        materialise.materialise(DatasetSpec(samples=8, profile="tiny"), "raw", tmp_path, progress=False)
    assert not list(tmp_path.glob("*.tmp-*")) and not list(tmp_path.glob("*-raw"))


def test_room_errors_of_libraries_are_recognised():
    assert space.is_room_error(OSError(28, "No space left on device"))
    assert space.is_room_error(OSError(30, "Read-only file system"))
    assert space.is_room_error(RuntimeError("Can't write data (file write failed: errno = 28, ...)"))
    assert not space.is_room_error(ValueError("min_batch 100 exceeds max_batch 16"))


def test_a_stale_temporary_folder_is_removed(tmp_path):
    spec = DatasetSpec(samples=8, profile="tiny")
    final = materialise.directory(spec, "mmap", tmp_path)
    stale = final.with_name(final.name + ".tmp-999999999")  # no such process
    stale.mkdir(parents=True)
    materialise.materialise(spec, "mmap", tmp_path, progress=False)
    assert not stale.exists() and final.is_dir()


# --- --resume ------------------------------------------------------------------------------------------------

def _fake_run(tmp_path: Path, lines: list[str]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    path = scenario(tmp_path)
    rundir_argv = ["--scenario", str(path), "--data-dir", str(tmp_path / "data"), "--out", str(tmp_path)]
    (run / "env.json").write_text(json.dumps({"settings": {"scenario": "s"}, "argv": rundir_argv}))
    (run / "cells.jsonl").write_text("".join(lines))
    return run


def test_resume_with_other_options_names_them(tmp_path, capsys):
    run = _fake_run(tmp_path, [])
    code = cli.main(["--resume", str(run), "--steps", "99", "--workers", "3"])
    one_line(code, capsys.readouterr().err, "these options differ from the run's: --steps 99 (the run's: not given,"
                                            " the scenario's); --workers 3")


def test_resume_of_a_run_with_a_damaged_middle_line_names_file_and_line(tmp_path, capsys):
    fixture = (Path(__file__).parent / "fixtures" / "cells_1xV100.jsonl").read_text().splitlines()
    run = _fake_run(tmp_path, [fixture[0] + "\n", "{broken\n", fixture[1] + "\n"])
    code = cli.main(["--resume", str(run), "--quiet"])
    one_line(code, capsys.readouterr().err, f"{run / 'cells.jsonl'}:2 is not valid JSON")
