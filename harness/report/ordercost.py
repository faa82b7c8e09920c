"""What a cell's order costs beyond speed, for the first screen: the order figures decided less
mixed than an ideal shuffle by more than the tolerance (--order-tolerance, recorded in env.json;
TOLERANCE by default), and a training loss decided worse than the shuffle's by more than it.
FASTEST names the leader's cost; ROLL OUT passes over a faster cell with a cost for the fastest one
without, and says so (docs/order-quality.md)."""
from __future__ import annotations

from harness.report.tables import order_decisions
from harness.results.orderquality import LESS_MIXED
from harness.results.repeats import CellSummary

TOLERANCE = 0.10

# order figure -> (its ratio to an ideal shuffle's, 1 for a shuffle; the words for it)
RATIOS = {"units": ("order_units_ratio", "storage units met per batch"),
          "position": ("order_position_mixing", "position mixing (1 - |rho|)"),
          "labels": ("order_label_ratio", "class mix per batch")}


def tolerance_of(env) -> float:
    """The run's --order-tolerance (env.json), else TOLERANCE."""
    value = getattr(env, "order_tolerance", None) if env is not None else None
    return TOLERANCE if value is None else float(value)


def order_costs(cell: CellSummary, tolerance: float) -> list[str]:
    """The cell's order costs beyond `tolerance`, in words; [] for an order as random as a shuffle
    (or within the tolerance), and for a cell that recorded no order."""
    f = cell.figures
    out = []
    if f.order_units_per_batch is not None:
        for key, word in order_decisions(f).items():
            name, words = RATIOS[key]
            ratio = getattr(f, name)
            if word == LESS_MIXED and ratio is not None and ratio < 1.0 - tolerance:
                out.append(f"{words} x{ratio:.2f} of a shuffle's")
    low = f.order_train_ratio_low
    if low is not None and low > 1.0 + tolerance:
        out.append(f"held-out loss x{f.order_train_ratio:.2f} of a shuffle's after {f.order_train_steps} steps")
    return out


def cost_text(costs: list[str], tolerance: float) -> str:
    return f"{'; '.join(costs)} (less random than a shuffle beyond --order-tolerance {tolerance:.0%})"
