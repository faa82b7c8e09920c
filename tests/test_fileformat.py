"""harness.results.fileformat: every JSON file of a run directory carries its format's version, is written
through the one helper (atomically where a reader may look meanwhile) and read through it: an older version
upgraded on read through the kind's chain of steps, a newer one refused in one line naming the file and the
remedy, a damaged file one line with its path."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.analysis import effects
from harness.analysis.effects import EFFECTS, Effect
from harness.checks.predictions import cases as predcases
from harness.loaderonly import rows as loaderonly_rows
from harness.loaderonly.rows import DECODE, LOADER, DecodeRow, LoaderRow, read_rows, write_rows
from harness.report.effecttables import read_effects, write_effects
from harness.results import cellresult, environment, fileformat, probeline, rundir
from harness.results.cellresult import CELLS, CellResult
from harness.results.environment import ENV, Environment
from harness.results.fileformat import VERSION_KEY, FileFormat, ResultsError, unchanged
from harness.results.probeline import PROBE, ProbeLine

FIXTURES = Path(__file__).parent / "fixtures"
# every format a run directory's files have, and the module that declares it beside its record
FORMATS = {"cells.jsonl": (cellresult, CELLS), "env.json": (environment, ENV), "probe.jsonl": (probeline, PROBE),
           "loader.jsonl": (loaderonly_rows, LOADER), "decode.jsonl": (loaderonly_rows, DECODE),
           "effects.jsonl": (effects, EFFECTS), "predictions.jsonl": (predcases, predcases.PREDICTIONS)}


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text, text
    return text


def chain() -> FileFormat:
    """A format at version 3 whose steps rename a key (1 -> 2) and fill a new one (2 -> 3)."""
    return FileFormat("things.jsonl", 3, {1: "a", 2: "renamed to b", 3: "c added"},
                      {1: lambda o: {**{k: v for k, v in o.items() if k != "a"}, "b": o["a"]},
                       2: lambda o: {**o, "c": o["b"] * 2}})


def test_every_file_of_a_run_directory_has_a_format_with_its_history():
    for name, (module, fmt) in FORMATS.items():
        assert fmt.name == name and isinstance(fmt.version, int) and fmt.version >= 1
        assert sorted(fmt.history) == list(range(1, fmt.version + 1)), name  # what every version is
        assert all(len(text) > 40 for text in fmt.history.values()), name
        assert sorted(fmt.upgrades) == list(range(1, fmt.version)), name  # a step from every older version
        assert fmt.name.split(".")[0] in (module.__doc__ or "")  # the module says it owns the file
    assert CELLS.version == cellresult.SCHEMA_VERSION == 2 and ENV.version == environment.ENV_VERSION


def test_a_format_must_say_what_each_version_is_and_step_from_each_older_one():
    with pytest.raises(ValueError, match="history"):
        FileFormat("x.jsonl", 2, {2: "only the new one"}, {1: unchanged})
    with pytest.raises(ValueError, match="upgrade step"):
        FileFormat("x.jsonl", 2, {1: "a", 2: "b"})


def test_the_writers_write_the_current_version(tmp_path):
    fmt = chain()
    fileformat.write_json(tmp_path / "a.json", {"x": 1}, fmt)
    fileformat.write_lines(tmp_path / "b.jsonl", [{"x": 1}, {"x": 2}], fmt)
    fileformat.append_line(tmp_path / "b.jsonl", {"x": 3}, fmt)
    assert json.loads((tmp_path / "a.json").read_text()) == {"x": 1, VERSION_KEY: 3}
    lines = [json.loads(line) for line in (tmp_path / "b.jsonl").read_text().splitlines()]
    assert [line[VERSION_KEY] for line in lines] == [3, 3, 3] and [line["x"] for line in lines] == [1, 2, 3]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.jsonl"]  # no temporary file left
    with pytest.raises(ValueError, match="version 1 is written as version 3"):
        fmt.stamped({VERSION_KEY: 1, "a": 1})  # a record read from an older file is not written as current


def test_each_record_writes_its_files_version(tmp_path):
    env = Environment(scenario="smoke")
    env.write(tmp_path)
    assert json.loads((tmp_path / "env.json").read_text())[VERSION_KEY] == ENV.version
    rundir.append_probe(tmp_path, ProbeLine(0, 100.0, 5.0))
    assert json.loads((tmp_path / "probe.jsonl").read_text())[VERSION_KEY] == PROBE.version
    write_rows(tmp_path / "loader.jsonl", [LoaderRow("raw", "pixels", "warm", 8)])
    write_rows(tmp_path / "decode.jsonl", [DecodeRow("256-511", 3, "pil", 64, 1.5)])
    assert json.loads((tmp_path / "loader.jsonl").read_text())[VERSION_KEY] == LOADER.version
    assert json.loads((tmp_path / "decode.jsonl").read_text())[VERSION_KEY] == DECODE.version
    effect = Effect("throughput", "storage", "mmap", "raw", 1.1, 1.0, 1.2, 6)
    write_effects(tmp_path, [effect])
    assert json.loads((tmp_path / "effects.jsonl").read_text())[VERSION_KEY] == EFFECTS.version
    line = json.loads((FIXTURES / "cells_schema2.jsonl").read_text().splitlines()[0])
    rundir.append_cell(tmp_path, line)
    assert json.loads((tmp_path / "cells.jsonl").read_text())[VERSION_KEY] == CELLS.version
    # and each reads back as written
    assert rundir.read_env(tmp_path) == env and rundir.read_probe(tmp_path).ideal(0) == 100.0
    assert read_rows(tmp_path / "loader.jsonl", LoaderRow) == [LoaderRow("raw", "pixels", "warm", 8)]
    assert read_effects(tmp_path) == [effect] and rundir.read_results(tmp_path)[0].to_json() == line


def test_an_older_version_is_upgraded_on_read_step_by_step(tmp_path):
    fmt = chain()
    (tmp_path / "t.jsonl").write_text('{"a": 2}\n{"schema": 2, "b": 5}\n{"schema": 3, "b": 1, "c": 7}\n')
    assert fileformat.read_lines(tmp_path / "t.jsonl", fmt) == [
        {"b": 2, "c": 4}, {"schema": 2, "b": 5, "c": 10}, {"schema": 3, "b": 1, "c": 7}]  # each line its own
    (tmp_path / "t.json").write_text('{"a": 1}')
    assert fileformat.read_json(tmp_path / "t.json", fmt) == {"b": 1, "c": 2}
    assert fileformat.read_json(tmp_path / "absent.json", fmt) is None
    assert fileformat.read_lines(tmp_path / "absent.jsonl", fmt) == []


def test_a_cells_line_of_version_1_goes_through_the_step_from_1_and_is_written_back_as_read(tmp_path):
    old = (FIXTURES / "cells_4xV100.jsonl").read_text().splitlines()[0]
    (tmp_path / "cells.jsonl").write_text(old + "\n")
    r = rundir.read_results(tmp_path)[0]
    assert r.schema == 1 and r.legacy_figures == {"au_pct"}  # the step from version 1 (cellresult._from_v1)
    assert r.figures.window_imbalance == json.loads(old)["figures"]["imbalance"]
    assert r.to_json() == json.loads(old)  # in memory only: nothing rewritten
    assert (tmp_path / "cells.jsonl").read_text() == old + "\n"


def test_files_without_the_key_are_version_1(tmp_path):
    (tmp_path / "env.json").write_text(json.dumps({"scenario": "smoke", "python": "3.11.7"}))
    (tmp_path / "probe.jsonl").write_text('{"repeat": 0, "ideal_samples_per_s": 10, "memcpy_gb_s": 1}\n')
    (tmp_path / "effects.jsonl").write_text(json.dumps({"figure": "au", "axis": "storage", "level": "raw",
                                                        "reference": "raw", "ratio": 1, "low": 1, "high": 1,
                                                        "n": 3}) + "\n")  # before `kind`: a main effect
    env = rundir.read_env(tmp_path)
    assert env.scenario == "smoke" and env.extra == {} and env.to_json()[VERSION_KEY] == ENV.version
    assert rundir.read_probe(tmp_path).ideal(0) == 10.0 and read_effects(tmp_path)[0].kind == "main"


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_a_newer_version_is_refused_in_one_line_naming_the_file_and_the_remedy(tmp_path, name):
    fmt = FORMATS[name][1]
    obj = {VERSION_KEY: fmt.version + 1, "cell": "storage=raw"}
    path = tmp_path / name
    path.write_text(json.dumps(obj) + ("\n" if name.endswith(".jsonl") else ""))
    read = fileformat.read_json if name.endswith(".json") else fileformat.read_lines
    with pytest.raises(ResultsError) as err:
        read(path, fmt)
    text = one_line(err)
    assert str(path) in text and f"version {fmt.version + 1}" in text and f"reads up to {fmt.version}" in text
    assert "git pull" in text and "env.json's git commit" in text


def test_the_run_directorys_readers_refuse_a_newer_version(tmp_path):
    (tmp_path / "cells.jsonl").write_text(json.dumps({"schema": 3, "cell": "storage=raw"}) + "\n")
    (tmp_path / "env.json").write_text(json.dumps({"schema": 2}))
    (tmp_path / "probe.jsonl").write_text(json.dumps({"schema": 9, "ideal_samples_per_s": 1, "memcpy_gb_s": 1}))
    for read, where in ((rundir.read_results, "cells.jsonl:1"), (rundir.read_env, "env.json"),
                        (rundir.read_probe, "probe.jsonl:1")):
        with pytest.raises(ResultsError, match=f"{where}: .* version .*; this harness reads up to"):
            read(tmp_path)
    with pytest.raises(ValueError, match="reads up to 2"):  # a line read in code, without its file
        CellResult.from_json({"schema": 3, "cell": "c"})


@pytest.mark.parametrize("text, says", [("{not json", "is not valid JSON"), ("[1, 2]", "is not a JSON object"),
                                        ('{"schema": "two"}', "schema 'two' is not a"),
                                        ('{"schema": true}', "schema True is not a")])
def test_a_damaged_file_is_one_line_with_its_path(tmp_path, text, says):
    (tmp_path / "env.json").write_text(text)
    with pytest.raises(ResultsError) as err:
        rundir.read_env(tmp_path)
    assert str(tmp_path / "env.json") in one_line(err) and says in str(err.value)


def test_a_damaged_line_is_one_line_with_its_place(tmp_path):
    (tmp_path / "probe.jsonl").write_text('{"repeat": 0, "memcpy_gb_s": 1}\n')
    with pytest.raises(ResultsError) as err:
        rundir.read_probe(tmp_path)
    assert one_line(err).startswith(f"{tmp_path / 'probe.jsonl'}:1: lacks 'ideal_samples_per_s'")
    (tmp_path / "loader.jsonl").write_text('[1]\n{"storage": "raw"}\n')
    with pytest.raises(ResultsError, match="loader.jsonl:1 is not a JSON object"):
        read_rows(tmp_path / "loader.jsonl", LoaderRow)
    (tmp_path / "cells.jsonl").write_text('{"cell": "c", "ranks": 5}\n')
    with pytest.raises(ResultsError, match="cells.jsonl:1: .*not the shape of cells.jsonl this harness writes"):
        rundir.read_results(tmp_path)
    (tmp_path / "effects.jsonl").write_text('{"figure": "au"}\n{"figure": "au"\n')  # the cut last line is skipped
    with pytest.raises(ResultsError, match="effects.jsonl:1: .*not the shape of effects.jsonl"):
        read_effects(tmp_path)


def test_a_predictions_line_of_version_1_reads_with_the_idle_host_model_as_its_headline(tmp_path):
    """Version 1's `predicted` was fitted to the calibration's measured samples/s; version 2's headline is
    the absolute model, which version 1 kept as `predicted_idle_host`."""
    path = tmp_path / "predictions.jsonl"
    path.write_text(json.dumps({"config": "storage mmap", "predicted": 1100.0, "measured": 1000.0, "error_pct": 10.0,
                                "predicted_idle_host": 1200.0, "run_cores": 1.5}) + "\n"
                    + json.dumps({"config": "calibration", "predicted": 900.0, "measured": 900.0, "error_pct": 0.0,
                                  "predicted_idle_host": 1000.0, "run_cores": 1.5}) + "\n")
    case, calib = fileformat.read_lines(path, predcases.PREDICTIONS)
    assert case["predicted"] == 1200.0 and case["predicted_fitted"] == 1100.0 and case["error_pct"] == 20.0
    assert case["scored"] and case["source"] == "calibration" and "run_cores" not in case
    assert calib["flag"] == "calibration" and not calib["scored"]
