"""harness.results.environment: env.json captured once, with every library that can change a figure, and
read back from any harness version without losing a key."""
from __future__ import annotations

import json

import pytest

from harness.results import environment, rundir
from harness.results.environment import LIBRARIES, Environment


def test_capture_records_every_library_that_can_change_a_figure():
    env = Environment.capture(["--scenario", "smoke"], {"mode": "emulated"})
    for lib in ("torch", "numpy", "h5py", "pillow", "simplejpeg", "pyarrow", "lmdb", "webdataset"):
        assert lib in LIBRARIES and env.versions[lib], lib  # installed by pyproject.toml, so a version
    assert env.command[-2:] == ["--scenario", "smoke"] and env.cpu_count and env.python.count(".") == 2
    assert env.time_utc.endswith("Z") and env.machine["cpu_count"] == env.cpu_count


def test_round_trip_keeps_unknown_keys_and_leaves_unset_settings_out(tmp_path):
    env = Environment.capture([], {"mode": "emulated"})
    env.scenario, env.imported, env.dataset_gb = "ci", {"layout": "files"}, 0.5
    obj = env.to_json()
    assert obj["import"] == {"layout": "files"} and "imported" not in obj
    assert "settings" not in obj and "resumed" not in obj  # None run settings are not written
    newer = dict(obj, written_by_a_newer_harness={"x": 1})
    (tmp_path / "env.json").write_text(json.dumps(newer))
    back = rundir.read_env(tmp_path)
    assert back.imported == {"layout": "files"} and back.extra == {"written_by_a_newer_harness": {"x": 1}}
    back.write(tmp_path)
    assert json.loads((tmp_path / "env.json").read_text()) == newer


def test_an_old_env_json_reads_with_defaults(tmp_path):
    (tmp_path / "env.json").write_text(json.dumps({"python": "3.11.7", "versions": {"torch": "2.1.0"}}))
    env = rundir.read_env(tmp_path)
    assert env.torch_version == "2.1.0" and env.scenario is None and env.gpus == []
    assert rundir.read_env(tmp_path / "missing") == Environment()


@pytest.mark.parametrize("text", ["{not json", "[1, 2]"])
def test_a_broken_env_json_is_one_line_naming_the_file(tmp_path, text):
    (tmp_path / "env.json").write_text(text)
    with pytest.raises(rundir.ResultsError, match="env.json"):
        rundir.read_env(tmp_path)


def test_the_data_dirs_block_device_and_read_ahead_are_recorded(tmp_path):
    env = Environment.capture(["--data-dir", str(tmp_path)], {"mode": "emulated"})
    obj = env.to_json()
    assert obj["data_dir"] == str(tmp_path) and {"data_device", "read_ahead_kb"} <= set(obj)
    assert env.read_ahead_kb is None or (env.data_device and env.read_ahead_kb >= 0)  # a number only with a device
    assert Environment.capture([f"--data-dir={tmp_path}"], {}).data_dir == str(tmp_path)
    older = {k: v for k, v in obj.items() if k not in ("data_dir", "data_device", "read_ahead_kb")}
    back = Environment.from_json(older)  # an env.json written before these keys
    assert back.data_dir is None and back.read_ahead_kb is None and back.extra == {}


def test_block_device_follows_the_device_number_to_the_disks_queue(tmp_path):
    import os

    from harness.data.pagecache import block_device

    sys_root, data = tmp_path / "sys", tmp_path / "data"
    data.mkdir()
    dev = os.stat(data).st_dev
    disk = sys_root / "devices" / "virtual" / "block" / "vdz"
    (disk / "vdz1").mkdir(parents=True)  # a partition: no queue of its own
    (disk / "queue").mkdir()
    (disk / "queue" / "read_ahead_kb").write_text("4096\n")
    (sys_root / "dev" / "block").mkdir(parents=True)
    link = sys_root / "dev" / "block" / f"{os.major(dev)}:{os.minor(dev)}"
    link.symlink_to(disk / "vdz1")
    assert block_device(data / "not-yet" / "made", sys_root) == ("vdz", 4096)  # the nearest existing parent
    link.unlink()
    assert block_device(data, sys_root) == (None, None)  # no such device (tmpfs, overlay): unknown


def test_a_free_threaded_interpreter_is_read_from_its_build_flag_and_its_gil(monkeypatch):
    """Py_GIL_DISABLED says the build is free-threaded; sys._is_gil_enabled whether the GIL is off now (a
    free-threaded build runs with it on under PYTHON_GIL=1). This machine's 3.11 has neither."""
    flags = {"Py_GIL_DISABLED": 0}
    monkeypatch.setattr(environment.sysconfig, "get_config_var", lambda name: flags.get(name))
    assert environment.free_threaded() is False
    flags["Py_GIL_DISABLED"] = 1
    monkeypatch.setattr(environment.sys, "_is_gil_enabled", lambda: False, raising=False)
    assert environment.free_threaded() is True
    monkeypatch.setattr(environment.sys, "_is_gil_enabled", lambda: True, raising=False)
    assert environment.free_threaded() is False
    assert environment.Environment.capture([], {}).free_threaded is False  # recorded; this interpreter has the GIL
