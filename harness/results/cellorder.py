"""A cell's order figures, from the records its ranks gathered to rank 0: each rank's order over
its measured window (the indices it consumed per epoch, `consumed`, cut by the window's
`batch_sizes`: harness.results.orderquality.window_order), against the ideal shuffle of the cell's
dataset laid out as its storage lays it out (the storage's units noted by
harness.data.storageunits, else blocks of orderquality.DEFAULT_BLOCK positions; the classes of
harness.data.generator.class_labels).

The figures go into the cell's `figures` (ORDER_FIGURES, over every rank's batches and segments)
and each rank's into its `order` part (harness.results.cellparts.OrderQuality). The ratios are the
forms fitted as effects, 1 for an ideal shuffle: `order_units_ratio` (units met / the ideal's),
`order_position_mixing` (1 - |rho|), `order_label_ratio` (the ideal's TV distance / the batches').

On data with classes the cell's order is also trained on (harness.results.ordertraining: a softmax
classifier of the class, the window's steps, against the ideal shuffle's over the same seeds):
TRAIN_FIGURES, `order_train_*`.
"""
from __future__ import annotations

from harness.data.generator import class_labels
from harness.data.storageunits import noted
from harness.measure.rankrecord import RankRecord
from harness.results import orderquality as oq
from harness.results import ordertraining as ot
from harness.results.cellparts import OrderQuality, RankOrderQuality

# the cell's figures: Figures name -> orderquality.OrderFigures attribute
ORDER_FIGURES = {
    "order_units_per_batch": "units_per_batch", "order_units_ideal": "units_ideal",
    "order_units_ideal_sd": "units_ideal_sd", "order_position_rho": "position_rho",
    "order_position_ideal_sd": "position_ideal_sd", "order_label_tv": "label_tv",
    "order_label_tv_ideal": "label_tv_ideal", "order_label_tv_ideal_sd": "label_tv_ideal_sd"}
RATIOS = ("order_units_ratio", "order_position_mixing", "order_label_ratio")  # fitted as effects
DIGITS = 6
# what training on the order did: Figures name -> ordertraining.TrainingFigures attribute
TRAIN_FIGURES = {
    "order_train_steps": "steps", "order_train_seeds": "seeds", "order_train_loss": "loss",
    "order_train_loss_shuffle": "loss_shuffle", "order_train_ratio": "ratio", "order_train_ratio_low": "ratio_low",
    "order_train_ratio_high": "ratio_high", "order_train_accuracy": "accuracy",
    "order_train_accuracy_shuffle": "accuracy_shuffle"}


def cell_layout(dataset, cell_id: str) -> oq.Layout:
    """The dataset's layout as the cell's storage holds it (samples in index order)."""
    _, units = noted(cell_id)
    return oq.layout(int(dataset.samples), unit_ranges=units, classes=class_labels(dataset))


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(float(value), DIGITS)


def figures_of(f: oq.OrderFigures) -> dict:
    """The cell's `order_*` figures (None where not computable), the three ratios among them."""
    out = {name: _rounded(getattr(f, attr)) for name, attr in ORDER_FIGURES.items()}
    units, ideal = f.units_per_batch, f.units_ideal
    out["order_units_ratio"] = _rounded(units / ideal) if units is not None and ideal else None
    out["order_position_mixing"] = _rounded(1 - abs(f.position_rho)) if f.position_rho is not None else None
    tv, tv_ideal = f.label_tv, f.label_tv_ideal
    out["order_label_ratio"] = _rounded(tv_ideal / tv) if tv and tv_ideal is not None else None
    return {k: v for k, v in out.items() if v is not None}


def training_of(orders: list[oq.RankOrder], dataset) -> dict:
    """The `order_train_*` figures of the ranks' window orders; {} without classes or a step."""
    if class_labels(dataset) is None:
        return {}
    f = ot.training_figures(ot.task_of(dataset), ot.order_steps(orders))
    if f is None:
        return {}
    return {name: getattr(f, attr) if isinstance(getattr(f, attr), int) else _rounded(getattr(f, attr))
            for name, attr in TRAIN_FIGURES.items()}


def _rank_part(rank: int, f: oq.OrderFigures) -> RankOrderQuality:
    return RankOrderQuality(rank=rank, batches=f.batches, samples=f.samples,
                            **{attr: _rounded(getattr(f, attr)) for attr in ORDER_FIGURES.values()})


def of_cell(records: list[RankRecord], dataset, cell_id: str) -> tuple[dict, OrderQuality | None]:
    """(the cell's order figures, its `order` part), or ({}, None) for a cell that failed, recorded
    no order (lines read back carry none: `consumed` is never written) or read indices outside the
    dataset."""
    if any(r.error for r in records) or not records:
        return {}, None
    orders = [(r.rank, oq.window_order(r.consumed, r.batch_sizes)) for r in records]
    orders = [(rank, o) for rank, o in orders if o is not None]
    size = int(dataset.samples)
    if not orders or any(o.indices.size and (o.indices.min() < 0 or o.indices.max() >= size) for _, o in orders):
        return {}, None
    lay = cell_layout(dataset, cell_id)
    cell = oq.order_figures([o for _, o in orders], lay)
    if cell is None:
        return {}, None
    ranks = [_rank_part(rank, oq.order_figures([o], lay)) for rank, o in orders]
    sizes = lay.class_sizes()
    part = OrderQuality(unit=lay.unit_name, units=int(lay.unit_sizes().size),
                        classes=0 if sizes is None else int(sizes.size),
                        label_spread=oq.LABEL_SPREAD if cell.label_tv is not None else "", ranks=ranks)
    return {**figures_of(cell), **training_of([o for _, o in orders], dataset)}, part
