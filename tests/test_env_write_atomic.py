"""env.json is replaced atomically: under torchrun the ranks of a resumed run read it while rank 0 rewrites
it (a reader once found it empty, and the Slurm check's resume failed: 1 run in 8)."""
from __future__ import annotations

import json
import threading

from harness.results.environment import Environment


def test_a_reader_never_sees_env_json_half_written(tmp_path):
    env = Environment(scenario="smoke", argv=["--scenario", "smoke"], settings={"cells": ["a" * 64] * 200})
    env.write(tmp_path)
    bad, stop = [], threading.Event()

    def read():
        while not stop.is_set():
            try:
                json.loads((tmp_path / "env.json").read_text())
            except ValueError as err:
                bad.append(err)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(1000):
            env.write(tmp_path)
    finally:
        stop.set()
        reader.join()
    assert not bad, f"{len(bad)} reads of env.json found it half written: {bad[0]}"
    assert [p.name for p in tmp_path.iterdir()] == ["env.json"]
