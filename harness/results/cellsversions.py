"""cells.jsonl's format (harness.results.fileformat): the version this harness writes
(SCHEMA_VERSION), what each version is (CELLS_HISTORY; docs/results-format.md, "Versions"), and the
step from each older version, applied in memory to the harness.results.cellresult.CellResult a line
is read as: a line read is written back as it was read. CellResult.from_json reads every line
through CELLS."""
from __future__ import annotations

from harness.results.fileformat import FileFormat

# cells.jsonl's format version (written under "schema" in each line), and what each version is
# (docs/results-format.md, "Versions"). Adding an optional key does not change the version; changing the
# meaning of a key does.
SCHEMA_VERSION = 2
CELLS_HISTORY = {
    1: "lines without `schema`: a rank's step was `compute` (which held the per-step agreement, `sync`, and "
       "any host overrun) plus `wait` and `h2d`; `au_pct` = sum(compute) / window; `imbalance` the "
       "window-total straggler figure",
    2: "a rank's step accounted once into five parts (`wait`, `h2d`, `peer_wait`, `device`, `overhead`), "
       "`au_pct` device-busy time only; `imbalance` became `window_imbalance`, beside `step_imbalance` and "
       "`cost_imbalance`; loader CPU per sample, `cores_to_feed`, the within-run `throughput_ci`. Added "
       "within version 2 (absent in older lines, filled in on read where they can be): `advice`; the figures "
       "`rank_cpu_s_per_sample`, `read_amplification`, `setup_s`, `window_share_pct`, `other_cpu_pct`, "
       "`steal_pct`, `decode_limit_ratio`, the gates' `loader_vs_decode`, `decode_vs_reference` and "
       "`rank_vs_reference`, `kernel_au_pct`, `launch_ms_p50`, a remote storage's `remote_*` "
       "figures and `disk_hit_pct`; the order's `order_*` figures and the `order` part (each rank's); the ranks' "
       "`launch`, `reference`, `rank_main_cpu_s`, "
       "`kernel_busy_s`, `kernel_span_s`, `loader`, `loader_thread_cpu_s`, "
       "`model`, `precision`, `preprocess`, "
       "`stages`, `setup_s`. Within version 2, a rank's `stages` (same keys) became timed stage by stage: "
       "in earlier lines its `queue` is a DataLoader worker's process CPU less its timed stages (the "
       "stages then sum to the /proc loader CPU by construction, and the `untimed` share a reader derives, "
       "/proc less the stages, is about 0 for them); later, `queue` is the worker loop's own CPU timed on "
       "its threads and `cache` and `transform` are timed around their calls, so what no timer covers "
       "shows as `untimed` (derived on read, no key added; docs/stage-profile.md)",
}
NO_HINT = "normal"  # the advice of a line written before the readers gave access hints


def _from_v1(result):
    """The step from version 1, in memory, on the harness.results.cellresult.CellResult read: its
    `imbalance` is `window_imbalance`; a line without the five-part split (no `h2d_pct`) has an
    `au_pct` of compute (which held the rank agreement and host overrun) / wall, not device-busy /
    wall: it is kept, and `legacy_figures` names it. `schema` stays 1: what is written back is what
    was read."""
    f = result.figures
    if f.window_imbalance is None and f.imbalance is not None:
        result.figures = f.derive(window_imbalance=f.imbalance)
    if f.h2d_pct is None:  # written before the five-part split
        result.legacy_figures = frozenset({"au_pct"})
    return result


CELLS = FileFormat("cells.jsonl", SCHEMA_VERSION, CELLS_HISTORY, {1: _from_v1})
