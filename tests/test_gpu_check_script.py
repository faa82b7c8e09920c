"""scripts/gpu_check.sh and its micro-checks (scripts/gpu/), on a machine without a GPU: the script parses, its
stage timeouts fit 9 minutes, every Python check imports and answers --help, skips cleanly without CUDA, and
the parts that need no GPU (the JPEG cases, the run-directory assertions, the harness calls the checks make)
do what they say."""
from __future__ import annotations

import importlib
import inspect
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
CHECKS = ROOT / "scripts" / "gpu"
MICRO = ("events", "streams", "decode", "memcheck", "nvmlbusy")
ALL = ("preflight", *MICRO, "check_run")
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")


def env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHON": sys.executable}


def module(name: str):
    if str(CHECKS) not in sys.path:
        sys.path.insert(0, str(CHECKS))
    return importlib.import_module(name)


def archived(out: Path, name: str) -> str:
    """A file of the work folder the script archived into OUT/gpu-check.tar.gz (OUT holds no other logs)."""
    import tarfile

    with tarfile.open(out / "gpu-check.tar.gz") as archive:
        return archive.extractfile(f"gpu-check/{name}").read().decode()


def run_check(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECKS / f"{name}.py"), *args], cwd=ROOT, env=env(),
                          capture_output=True, text=True, timeout=120)


def test_scripts_parse():
    for script in (SCRIPT, CHECKS / "fetch_wheels.sh"):
        subprocess.run([BASH, "-n", str(script)], check=True)


def test_stage_timeouts_fit_the_budget():
    listed = subprocess.run([BASH, str(SCRIPT), "--list"], capture_output=True, text=True, check=True).stdout
    rows = [line.split() for line in listed.splitlines()]
    stages = {name: int(seconds) for name, seconds, *_ in rows[:-1]}
    assert rows[-1][0] == "total" and int(rows[-1][1]) == sum(stages.values())
    assert sum(stages.values()) < 540
    # the one place they are set: the LIMIT table, one entry per stage of STAGES, nothing else
    text = SCRIPT.read_text()
    table = re.search(r"declare -A LIMIT=\((.*?)\)\n", text, re.S).group(1)
    assert dict((k, int(v)) for k, v in re.findall(r"\[(\w+)\]=(\d+)", table)) == stages
    order = re.search(r"^STAGES=\((.*?)\)", text, re.M).group(1).split()
    assert order == list(stages)
    assert len(re.findall(r"\btimeout --kill-after", text)) == 1  # every stage goes through run_stage


@pytest.mark.slow  # runs each check as a process
@pytest.mark.parametrize("name", ALL)
def test_each_check_imports_and_answers_help(name):
    assert callable(module(name).main)
    done = run_check(name, "--help")
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


@pytest.mark.slow  # runs each check as a process
@no_cuda
@pytest.mark.parametrize("name", MICRO)
def test_micro_checks_skip_without_cuda(name, tmp_path):
    done = run_check(name, "--out", str(tmp_path))
    assert done.returncode == module("gpucommon").SKIPPED, done.stdout + done.stderr
    assert done.stdout.startswith(f"SKIP {name}: no CUDA device visible")
    assert "Traceback" not in done.stderr


@pytest.mark.slow  # runs the script with bash
@no_cuda
def test_preflight_fails_without_cuda_and_names_it(tmp_path):
    done = run_check("preflight", "--out", str(tmp_path))
    assert done.returncode == 1
    assert re.search(r"FAILED +cuda: torch sees no CUDA device", done.stdout)
    assert re.search(r"ok +harness: imports", done.stdout)  # the items that need no GPU still ran
    assert done.stdout.strip().splitlines()[-1].startswith("FAIL preflight: failed: ")
    assert json.loads((tmp_path / "preflight.json").read_text())["ok"] is False


def test_uuid_text_matches_nvml_and_torch_spellings():
    u = module("gpucommon").uuid_text
    assert u(b"GPU-1A2B3C4D-0000-1111-2222-333344445555") == u("1a2b3c4d-0000-1111-2222-333344445555")
    assert u("MIG-abc").startswith("mig-")


def test_decode_cases_are_the_jpegs_the_check_names():
    from PIL import Image

    decode = module("decode")
    made = decode.jpegs()
    assert set(made) >= {"baseline", "progressive", "grayscale", "odd-size"}
    for name, data in made.items():
        width, height, mode, options = decode.CASES[name]
        img = Image.open(io.BytesIO(data))
        assert img.format == "JPEG" and img.size == (width, height) and img.mode == mode
        assert bool(img.info.get("progressive") or img.info.get("progression")) == bool(options.get("progressive"))
    assert any(w % 2 and h % 2 for w, h, *_ in decode.CASES.values())


def test_decode_comparison_catches_a_wrong_decode():
    decode = module("decode")
    ref = {"a": torch.full((3, 8, 9), 100, dtype=torch.uint8), "b": torch.zeros((3, 4, 4), dtype=torch.uint8)}
    close = {"a": ref["a"] + 1, "b": ref["b"]}
    assert decode.compare(ref, close)[0]
    assert not decode.compare(ref, {"a": ref["a"] + 40, "b": ref["b"]})[0]  # far off
    assert not decode.compare(ref, {"a": ref["a"][:, :8, :8], "b": ref["b"]})[0]  # wrong shape


@pytest.mark.slow  # runs the checks as processes
def test_the_harness_calls_of_the_checks_still_fit():
    """memcheck and nvmlbusy call the harness directly: a changed signature fails here, not on the GPU."""
    from harness.device import memprobe
    from harness.device.standin import build_model
    from harness.measure.telemetry import NvmlSampler
    from harness.train.ddpstep import StepPrecision
    from strategies.registry import create, load_builtins

    load_builtins()
    mem = module("memcheck")
    inspect.signature(memprobe.measure).bind(object(), "pixels", mem.IMAGE_SIZE, object(), torch.device("cpu"))
    inspect.signature(StepPrecision).bind(create("precision", "amp"), cuda=True)
    inspect.signature(build_model).bind("pixels", True)
    for name in mem.PRECISIONS:
        create("precision", name)
    assert NvmlSampler(0).figures() is None  # nothing sampled yet: None, as nvmlbusy expects
    from harness.device.devices import CudaDevice, nvml_index_of

    for method in ("start_timer", "stop_timer", "timed_compute_s"):  # events times the harness's timer
        assert callable(getattr(CudaDevice, method))
    inspect.signature(CudaDevice).bind(0)
    assert all(hasattr(CudaDevice, m) for m in ("synchronize", "last_bytes"))  # what memcheck reads of it
    from harness.train.ddpstep import make_ddp, train_step

    inspect.signature(train_step).bind(object(), object(), object(), {}, 16, 16 * 160 * 160, False, object())
    inspect.signature(make_ddp).bind(object())
    inspect.signature(nvml_index_of).bind(0)
    oom = subprocess.run([sys.executable, "run_bench.py", "oomcheck", "--help"], cwd=ROOT, env=env(),
                         capture_output=True, text=True, timeout=120)
    assert oom.returncode == 0 and "--real" in oom.stdout and "--timeout" in oom.stdout  # what the oom stage passes
    assert "run_bench.py oomcheck --real --timeout 5" in SCRIPT.read_text()


# --- check_run on run directories written here -----------------------------------------------------------

def write_run(folder: Path, **overrides) -> Path:
    from harness.measure.rankrecord import Nvml, RankRecord
    from harness.results.cellresult import CellResult, Figures

    run = folder / "20260101T000000Z-gpu"
    run.mkdir(parents=True)
    figures = {"throughput": 900.0, "au_pct": 60.0, "nvml_util_pct": 55.0, "window_s": 3.0,
               **overrides.pop("figures", {})}
    rank = {"rank": 0, "device": [0.006] * 10, "step": [0.01] * 10, "device_peak_bytes": 5 << 30,
            "device_capacity_bytes": 140 << 30, "model": "CLIP (ResNet-50 + 2-layer text transformer)",
            "nvml": Nvml(nvml_util_mean_pct=55.0), **overrides.pop("rank", {})}
    line = {"cell": "storage=mmap,cache=none,batching=fixed,sampler=default", "emulated": False, **overrides}
    cell = CellResult(figures=Figures(**figures), ranks=[RankRecord(**rank)], **line)
    (run / "cells.jsonl").write_text(json.dumps(cell.to_json()) + "\n")
    return run


def check(path: Path, *args: str) -> subprocess.CompletedProcess:
    return run_check("check_run", str(path), "--cells", "1", "--ranks", "1", *args)


@pytest.mark.slow  # runs check_run.py as a process
def test_check_run_passes_a_good_run_found_under_its_out_folder(tmp_path):
    write_run(tmp_path)
    done = check(tmp_path)
    assert done.returncode == 0, done.stdout
    assert "AU 60.0% vs NVML 55.0%: 5.0 points" in done.stdout


@pytest.mark.parametrize("overrides, says", [
    ({"error": "OOM: CUDA out of memory"}, "error: OOM"),
    ({"emulated": True}, "emulated: the run did not use the GPU"),
    ({"rank": {"device_peak_bytes": 0}}, "device peak 0 B outside"),
    ({"rank": {"device_peak_bytes": 200 << 30}}, "outside (0, capacity"),
    ({"rank": {"model": "stand-in two-tower, emulated"}}, "trained the stand-in model"),
    ({"figures": {"nvml_util_pct": 30.0}}, "differ by 30.0 points (> 15.0)"),
    ({"figures": {"nvml_util_pct": None}}, "no NVML figures"),
    ({"figures": {"throughput": None}}, "no throughput"),
])
@pytest.mark.slow  # runs check_run.py as a process
def test_check_run_catches_each_fault(tmp_path, overrides, says):
    done = check(write_run(tmp_path, **overrides))
    assert done.returncode == 1
    assert says in done.stdout


@pytest.mark.slow  # runs check_run.py as a process
def test_check_run_leaves_short_windows_out_of_the_nvml_comparison(tmp_path):
    done = check(write_run(tmp_path, figures={"nvml_util_pct": 10.0, "window_s": 0.5}))
    assert done.returncode == 0, done.stdout
    assert "not compared (window 0.50 s < 2.0 s)" in done.stdout


@pytest.mark.slow  # runs check_run.py as a process
def test_check_run_without_cells_is_exit_2(tmp_path):
    assert check(tmp_path).returncode == 2


def trace(steps: dict[int, tuple[float, float]], kernels: list[tuple[float, float]]) -> dict:
    events = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "ts": a, "dur": b - a}
              for n, (a, b) in steps.items()]
    events += [{"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{n}", "ts": a, "dur": b - a}
               for n, (a, b) in steps.items()]  # the GPU-side copies: not the host's step
    events += [{"ph": "X", "cat": "kernel", "name": "k", "ts": a, "dur": b - a} for a, b in kernels]
    return {"traceEvents": events}


def test_kernel_time_is_the_union_of_kernels_inside_the_profiled_window_steps():
    from harness.measure.profiling import kernel_busy, union_within

    check_run = module("check_run")
    assert union_within([(0, 4), (2, 6), (8, 9), (20, 30)], 1, 10) == 6  # [1, 6) + [8, 9)

    class StubRank:
        device = [0.0, 0.0, 0.006, 0.006, 0.006, 0.0]
        step = [0.01] * 6

    # warm-up 3: ProfilerStep#5..7 are window steps 2..4; #9 is past the window and left out
    steps = {5: (0, 10_000), 6: (10_000, 20_000), 7: (20_000, 30_000), 9: (40_000, 50_000)}
    kernels = [(0, 3_000), (2_000, 6_000), (10_000, 16_000), (20_000, 26_000), (40_000, 50_000)]
    got = check_run.kernel_vs_events(trace(steps, kernels), StubRank, warmup=3)
    assert got == {"steps": [5, 6, 7], "kernel_au_pct": 60.0, "event_au_pct": 60.0}
    # what each rank writes beside its trace (harness.measure.profiling): busy and span per profiled step
    assert kernel_busy(trace(steps, kernels)) == {5: (6_000, 10_000), 6: (6_000, 10_000), 7: (6_000, 10_000),
                                                  9: (10_000, 10_000)}
    assert kernel_busy(trace(steps, [])) == {}  # no kernels (a CPU run)


@pytest.mark.slow  # runs check_run.py as a process, twice
@pytest.mark.parametrize("kernel_ms, ok", [(5.5, True), (2.0, False)])
def test_check_run_profile_compares_kernel_and_event_au(tmp_path, kernel_ms, ok):
    """The gap is reported, and a failure only where --kernel-points is given (the profile stage gives none)."""
    run = write_run(tmp_path)  # device 6 ms of 10 ms steps: event AU 60%
    folder = run / "traces" / "storage=mmap,cache=none,batching=fixed,sampler=default"
    folder.mkdir(parents=True)
    steps = {n: (n * 10_000, (n + 1) * 10_000) for n in (5, 6, 7)}
    kernels = [(a, a + kernel_ms * 1000) for a, _ in steps.values()]
    (folder / "rank0.123.pt.trace.json").write_text(json.dumps(trace(steps, kernels)))
    reported = check(run, "--profile", "--warmup-steps", "3")
    assert reported.returncode == 0, reported.stdout
    assert f"kernel AU {kernel_ms * 10:.1f}% vs event AU 60.0%" in reported.stdout
    done = check(run, "--profile", "--warmup-steps", "3", "--kernel-points", "10")
    assert (done.returncode == 0) == ok, done.stdout
    assert "--kernel-points" not in re.search(r"^ *profile\).*$", SCRIPT.read_text(), re.M).group(0)


@pytest.mark.slow  # runs check_run.py as a process
def test_each_run_stage_writes_its_own_check_json(tmp_path):
    write_run(tmp_path)
    done = check(tmp_path, "--out", str(tmp_path / "json"), "--name", "check_matrix")
    assert done.returncode == 0 and "PASS check_matrix" in done.stdout
    assert json.loads((tmp_path / "json" / "check_matrix.json").read_text())["ok"] is True
    assert '--name "check_$stage"' in SCRIPT.read_text()


# --- the script itself ----------------------------------------------------------------------------------

@pytest.mark.slow  # runs the script with bash
@no_cuda
def test_a_stage_skipped_without_cuda_is_not_a_pass(tmp_path):
    done = subprocess.run([BASH, str(SCRIPT), str(tmp_path)], env={**env(), "GPU_CHECK_STAGES": "events"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    summary = (tmp_path / "summary.txt").read_text().splitlines()
    assert re.match(r"events +SKIP +\d+ s +SKIP events: no CUDA device visible", summary[2])
    assert [line.split()[0] for line in summary[1:-1]] == re.search(
        r"^STAGES=\((.*?)\)", SCRIPT.read_text(), re.M).group(1).split()  # one line per stage
    assert archived(tmp_path, "events.log").startswith("== events (timeout ")


@pytest.mark.slow
@no_cuda
def test_without_a_gpu_the_preflight_stops_the_check(tmp_path):
    done = subprocess.run([BASH, str(SCRIPT)], env={**env(), "OUT": str(tmp_path)}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1
    summary = (tmp_path / "summary.txt").read_text()
    assert re.search(r"^preflight +FAIL", summary, re.M)
    stages = re.search(r"^STAGES=\((.*?)\)", SCRIPT.read_text(), re.M).group(1).split()
    assert len(re.findall(r"SKIP +0 s +the preflight failed", summary)) == len(stages) - 1  # all but the preflight


@pytest.mark.slow
def test_dry_run_lists_the_cells_of_every_run_stage(tmp_path):
    """The run stages' exact run_bench.py commands (an emulated H200 for "auto"): they parse and select the
    number of cells check_run then expects."""
    done = subprocess.run([BASH, str(SCRIPT), "--dry-run", str(tmp_path)], env=env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = (tmp_path / "summary.txt").read_text()
    for stage, cells in (("matrix", 6), ("extras", 4), ("profile", 1), ("torchrun", 1)):
        assert re.search(rf"^{stage} +PASS .* {cells} cells listed", summary, re.M), summary
    extras = archived(tmp_path, "extras.log")
    assert "batching=dynamic" in extras and "loader=threads" in extras and "side_stream=True" in extras


def test_docs_list_the_stages_with_the_scripts_timeouts():
    listed = subprocess.run([BASH, str(SCRIPT), "--list"], capture_output=True, text=True, check=True).stdout
    stages = {name: int(seconds) for name, seconds, *_ in (line.split() for line in listed.splitlines()[:-1])}
    doc = (ROOT / "docs" / "gpus.md").read_text()
    table = dict((k, int(v)) for k, v in re.findall(r"^\| (\w+) \| (\d+) s \|", doc, re.M))
    assert table == stages
    assert f"add up to {sum(stages.values())} s" in doc


@pytest.mark.slow  # runs check_run.py as a process
def test_check_run_can_require_an_nvml_comparison(tmp_path):
    run = write_run(tmp_path, figures={"window_s": 0.5})
    assert check(run).returncode == 0
    done = check(run, "--require-nvml")
    assert done.returncode == 1 and "AU was not compared with NVML" in done.stdout
