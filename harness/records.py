"""What a cell's result is: the line appended to cells.jsonl, built from the records of all its ranks."""
from __future__ import annotations

from harness import metrics
from harness.matrix import Cell
from harness.scenario import Scenario


def cell_line(scenario: Scenario, cell: Cell, device_name: str, emulated: bool, records: list[dict],
              elapsed: float) -> dict:
    """The JSON object appended to cells.jsonl for one cell."""
    errors = sorted({r["error"] for r in records if r.get("error")})
    ranks = [{k: v for k, v in r.items() if k != "consumed"} for r in records]
    return {
        "scenario": scenario.name,
        "cell": cell.id,
        "strategies": cell.strategies(),
        "params": {c.axis: dict(c.params) for c in cell.choices},
        "device": device_name,
        "emulated": emulated,
        "workload": scenario.training.workload,
        "batch_size": scenario.training.batch_size,
        "world_size": len(records),
        "elapsed_s": round(elapsed, 3),
        "figures": metrics.cell_figures(records),
        "coverage": metrics.coverage(records, scenario.dataset.samples),
        "cache": metrics.cache_figures(records),
        "page_cache": records[0].get("page_cache"),
        "decomposition": metrics.decomposition(records),
        "error": "; ".join(errors) or None,
        "ranks": ranks,
    }


def summary_text(line: dict) -> str:
    f = line["figures"]
    if line["error"]:
        return f"    {line['error']} ({line['elapsed_s']:.1f} s)"
    return (f"    {f.get('throughput', 0):.0f} samples/s, stall {f.get('stall_mean_pct', 0):.0f}%, "
            f"AU {f.get('au_pct', 0):.0f}% ({line['elapsed_s']:.1f} s)")
