"""A tampered or damaged run directory (env.json, cells.jsonl) read back by `report`, `target-report`,
`history add` and `compare`: each bad record is one line naming the file and the field, exit 2 (compare's
documented 3: a run directory it cannot compare), no traceback, no internal error, and nothing measured is
changed. Covers wrong types, nan/inf/1e400 figures, absurd integers, deep nesting, a line over the stated size,
a scenario given as a path, and a duplicated visit (one cell and repeat twice, as two concurrent --resume runs
left it)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import run_bench
from test_mistakes import run_cli

from harness.results import fileformat

RUN = Path(__file__).resolve().parent / "fixtures" / "run-v0.2"
MEASURED = ("cells.jsonl", "env.json", "probe.jsonl")
MAX_LINE_BYTES = getattr(fileformat, "MAX_LINE_BYTES", 16 * 2**20)  # the stated limit of one line
DEEP = "[" * 100_000 + "]" * 100_000


def _line(run: Path, change, number: int = 2) -> None:
    """cells.jsonl's line `number`, its object changed by `change` (which may return raw JSON text)."""
    path = run / "cells.jsonl"
    lines = path.read_text().splitlines()
    obj = json.loads(lines[number - 1])
    text = change(obj)
    lines[number - 1] = text if isinstance(text, str) else json.dumps(obj)
    path.write_text("\n".join(lines) + "\n")


def _figure(key: str, raw: str):
    """A figure of line 2 set to a raw JSON token (NaN, Infinity, 1e400 are not json.dumps'es)."""
    def change(obj):
        obj["figures"][key] = "@@"
        return json.dumps(obj).replace('"@@"', raw)
    return change


def _set(key: str, value):
    def change(obj):
        obj[key] = value
    return change


def _rank(key: str, value):
    def change(obj):
        obj["ranks"][0][key] = value
    return change


def _env(key: str, value, raw: str | None = None):
    def change(run: Path):
        env = json.loads((run / "env.json").read_text())
        env[key] = "@@" if raw is not None else value
        text = json.dumps(env, indent=2)
        (run / "env.json").write_text(text.replace('"@@"', raw) if raw is not None else text)
    return change


def _cells(change, number: int = 2):
    return lambda run: _line(run, change, number)


def _duplicated(run: Path) -> None:
    path = run / "cells.jsonl"
    path.write_text(path.read_text() + path.read_text().splitlines()[0] + "\n")


def _long_line(run: Path) -> None:
    _line(run, _set("error", "x" * (MAX_LINE_BYTES + 10)))


def _scenario_path(run: Path) -> None:
    evil = run.parent / "elsewhere.toml"
    evil.write_text('description = "any TOML file on disk"\n')
    _env("scenario", str(evil))(run)


# name -> (the tampering, the file the line names, what else it names)
CASES = {
    "throughput_nan": (_cells(_figure("throughput", "NaN")), "cells.jsonl:2", "throughput"),
    "throughput_inf": (_cells(_figure("throughput", "Infinity")), "cells.jsonl:2", "throughput"),
    "throughput_1e400": (_cells(_figure("throughput", "1e400")), "cells.jsonl:2", "throughput"),
    "throughput_negative": (_cells(_figure("throughput", "-5")), "cells.jsonl:2", "throughput"),
    "throughput_text": (_cells(_figure("throughput", '"fast"')), "cells.jsonl:2", "throughput"),
    "interval_text": (_cells(_figure("throughput_ci", '"wide"')), "cells.jsonl:2", "throughput_ci"),
    "repeat_1e20": (_cells(_set("repeat", 10**20)), "cells.jsonl:2", "repeat"),
    "repeat_text": (_cells(_set("repeat", "one")), "cells.jsonl:2", "repeat"),
    "repeat_negative": (_cells(_set("repeat", -1)), "cells.jsonl:2", "repeat"),
    "figures_list": (_cells(_set("figures", [1, 2])), "cells.jsonl:2", "figures"),
    "strategies_text": (_cells(_set("strategies", "raw")), "cells.jsonl:2", "strategies"),
    "cell_number": (_cells(_set("cell", 5)), "cells.jsonl:2", "cell"),
    "ranks_text": (_cells(_set("ranks", "two")), "cells.jsonl:2", "ranks"),
    "rank_wait_text": (_cells(_rank("wait", ["slow"])), "cells.jsonl:2", "wait"),
    "elapsed_text": (_cells(_set("elapsed_s", "long")), "cells.jsonl:2", "elapsed_s"),
    "world_size_float": (_cells(_set("world_size", 2.5)), "cells.jsonl:2", "world_size"),
    "deep_nesting": (_cells(lambda obj: json.dumps(obj)[:-1] + ', "deep": ' + DEEP + "}"), "cells.jsonl:2",
                     "nested"),
    "line_over_the_limit": (_long_line, "cells.jsonl:2", "MB"),
    "duplicated_visit": (_duplicated, "cells.jsonl", "repeat 0"),
    "env_scenario_a_path": (_scenario_path, "env.json", "scenario"),
    "env_scenario_number": (_env("scenario", 5), "env.json", "scenario"),
    "env_scenario_list": (_env("scenario", ["smoke"]), "env.json", "scenario"),
    "env_repeats_1e20": (_env("repeats", 10**20), "env.json", "repeats"),
    "env_order_tolerance_nan": (_env("order_tolerance", None, "NaN"), "env.json", "order_tolerance"),
    "env_min_effect_negative": (_env("min_effect", -1), "env.json", "min_effect"),
    "env_min_effect_text": (_env("min_effect", "big"), "env.json", "min_effect"),
    "env_memory_1e400": (_env("memory_gb", None, "1e400"), "env.json", "memory_gb"),
    "env_cpu_count_text": (_env("cpu_count", "two"), "env.json", "cpu_count"),
    "env_settings_list": (_env("settings", ["cells"]), "env.json", "settings"),
    "env_comparable_text": (_env("comparable", "yes"), "env.json", "comparable"),
    "env_versions_list": (_env("versions", ["torch"]), "env.json", "versions"),
    "env_git_text": (_env("git", "abc"), "env.json", "git"),
    "env_argv_text": (_env("argv", "--scenario smoke"), "env.json", "argv"),
    "env_deep_nesting": (_env("notes", None, DEEP), "env.json", "nested"),
}
COMMANDS = ("report", "target-report", "history", "compare")


def _tampered(tmp_path: Path, case: str) -> Path:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    CASES[case][0](run)
    return run


def _args(command: str, run: Path, tmp_path: Path) -> list[str]:
    if command == "history":
        return ["history", "add", str(run), "--history", str(tmp_path / "h.sqlite")]
    if command == "compare":
        pristine = tmp_path / "pristine"
        shutil.copytree(RUN, pristine)
        return ["compare", str(pristine), str(run)]
    return [command, str(run)]


def _one_line(code: int, err: str, command: str, names: tuple[str, ...]) -> None:
    assert code == (3 if command == "compare" else 2), err
    assert "Traceback" not in err and "internal error" not in err, err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    for part in names:
        assert part in lines[0], lines[0]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", list(CASES))
def test_a_tampered_record_is_one_line_naming_file_and_field(case, command, tmp_path, capsys):
    run = _tampered(tmp_path, case)
    before = {name: (run / name).read_bytes() for name in MEASURED}
    code = run_cli(_args(command, run, tmp_path))
    _, where, field = CASES[case]
    _one_line(code, capsys.readouterr().err, command, (where, field))
    assert {name: (run / name).read_bytes() for name in MEASURED} == before  # nothing measured changed


def test_the_pristine_run_still_reads_in_every_command(tmp_path, capsys):
    for command in COMMANDS:
        run = tmp_path / command / "run"
        shutil.copytree(RUN, run)
        code = run_cli(_args(command, run, tmp_path / command))
        assert code == 0, capsys.readouterr().err


def test_the_scenario_of_env_json_is_resolved_among_shipped_scenarios_only(tmp_path):
    from harness.commands import rebuild_report
    from harness.errors import UsageError

    target = tmp_path / "t.toml"
    target.write_text("[target]\ncores_per_node = 8\n")
    with pytest.raises(UsageError, match="is not a shipped scenario"):
        rebuild_report.run_target_of(str(tmp_path / "mine.toml"), target)


@pytest.mark.slow  # runs run_bench.py as a process
@pytest.mark.parametrize("case", ["throughput_nan", "deep_nesting", "duplicated_visit", "env_scenario_a_path"])
def test_a_tampered_record_is_one_line_in_a_process(case, tmp_path):
    run = _tampered(tmp_path, case)
    proc = run_bench("report", str(run))
    _one_line(proc.returncode, proc.stderr, "report", CASES[case][1:])
