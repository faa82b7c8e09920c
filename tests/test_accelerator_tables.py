"""A scenario's own [accelerators.NAME] tables (harness.config.accelerators.load_catalogue): a GPU the
catalogue lacks, or a catalogue entry with a key changed, without editing scenarios/accelerators.toml."""
from __future__ import annotations

import pytest

from harness.config import scenario
from harness.errors import UsageError

BODY = """
[hardware]
accelerator = "{name}"
count = 1

{table}

[dataset]
samples = 64

[training]
workload = "features"
batch_size = 32
steps = 2

[matrix]
storage = ["mmap"]
"""


def _load(tmp_path, name: str, table: str):
    path = tmp_path / "mine.toml"
    path.write_text(BODY.format(name=name, table=table))
    return scenario.load(str(path), {})


def test_a_new_entry_sets_the_modelled_step(tmp_path):
    sc = _load(tmp_path, "STEP15", "[accelerators.STEP15]\nmemory_gb = 16.0\nresnet50_img_per_s = 1200.0\n"
                                   "fp16_tflops = 0.19047619\n")
    assert sc.accelerator.step_seconds("features", 32, 0) == pytest.approx(0.015, rel=1e-6)
    assert "scenario" in sc.accelerator.source


def test_a_catalogue_entry_with_one_key_replaced(tmp_path):
    sc = _load(tmp_path, "V100-16GB", "[accelerators.V100-16GB]\nmemory_gb = 8.0\n")
    assert sc.accelerator.memory_bytes == 8e9 and sc.accelerator.resnet50_img_per_s == 1200.0


@pytest.mark.parametrize("table, message", [
    ("[accelerators.X]\nmemory_gb = 16.0\n", "needs resnet50_img_per_s, fp16_tflops"),
    ("[accelerators.X]\nmemory_gb = 1\nresnet50_img_per_s = 1\nfp16_tflops = 1\nspeed = 3\n", "unknown key"),
    ("[accelerators.X]\nmemory_gb = -1\nresnet50_img_per_s = 1\nfp16_tflops = 1\n", "memory_gb = -1"),
])
def test_a_wrong_table_names_it(tmp_path, table, message):
    with pytest.raises(UsageError, match=message) as err:
        _load(tmp_path, "X", table)
    assert "accelerators.X" in str(err.value) and "mine.toml" in str(err.value)
