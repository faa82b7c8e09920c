"""The report's table of what each cell's order did to training (harness.results.ordertraining):
the held-out loss after the window's steps against the ideal shuffle's, the loss ratio with its
interval from the seeds, and the decision; cells without the figures (data without classes, lines
before them) have no row."""
from __future__ import annotations

from harness.report.tables import Table, display_name, fmt_throughput, mark, short_error, shown_axes
from harness.results.ordertraining import AS_SHUFFLE, BETTER, WORSE, decision
from harness.results.repeats import CellSummary

WORDS = {AS_SHUFFLE: "yes", WORSE: "no: trains worse", BETTER: "no: trains better"}
NOTE = ("A softmax classifier of the class from the image embedding, trained by SGD for the window's steps (each "
        "step the mean of the ranks' batch gradients, as data-parallel training steps) with the cell's recorded "
        "order and with an ideal shuffle of the same batch sizes, from the same initial weights, one pair per "
        "seed; the loss is the mean cross-entropy on a held-out set drawn from the dataset's class mix, mean "
        "over the seeds. The ratio's 95% interval is the t-interval of the paired differences widened by the "
        "order's one draw (sqrt(1 + 1/seeds)), over the shuffle's mean loss: 1 inside is 'as a shuffle'. "
        "Measured (the training is run, not modelled); a pure function of the order and the dataset.")


def _values(c: CellSummary) -> list[str] | None:
    f = c.figures
    if f.order_train_ratio is None:
        return None
    said = decision(f.order_train_ratio_low, f.order_train_ratio_high)
    return [fmt_throughput(c) if c.measured else short_error(c),
            f"{f.order_train_loss:.3f} vs {f.order_train_loss_shuffle:.3f}",
            f"x{f.order_train_ratio:.3f} [{f.order_train_ratio_low:.3f}, {f.order_train_ratio_high:.3f}]",
            f"{f.order_train_accuracy:.3f} vs {f.order_train_accuracy_shuffle:.3f}", WORDS[said]]


def training_table(cells: list[CellSummary]) -> Table:
    """Each cell's held-out loss after N steps against the shuffle's (N and the seeds from the
    first row)."""
    rows = [(c, shown) for c in cells if (shown := _values(c)) is not None]
    axes = shown_axes(cells)
    first = rows[0][0].figures if rows else None
    steps = f"{first.order_train_steps} steps" if first else "N steps"
    seeds = f", {first.order_train_seeds} seeds" if first else ""
    headers = [*axes, f"samples/s{mark(cells[:1])}", "held-out loss vs shuffle", "loss ratio [95%]",
               "accuracy vs shuffle", "trains as a shuffle?"]
    return Table(f"Training after {steps}{seeds}: held-out loss against the ideal shuffle's", headers,
                 [[display_name(cells, c, a) for a in axes] + shown for c, shown in rows], [NOTE])
