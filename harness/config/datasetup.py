"""Setting up a run's dataset before anything starts: generated (--scale full: CC3M's size) or
imported (--data PATH or [dataset] source), from the request's typed values
(harness.config.request)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.config import scenario
from harness.config.request import DataOptions, Overrides
from harness.data.importer import SourceSpec
from harness.errors import UsageError

CC3M_SAMPLES = 3_318_333  # image-caption pairs in Conceptual Captions 3M's training split


def with_source(sc: scenario.Scenario, data: DataOptions, samples: int | None = None) -> scenario.Scenario:
    """The scenario with --data as its dataset (or its [dataset] source with --data-format /
    --strict-data applied); unchanged when neither is set. `samples`: --samples, the limit of an
    imported source."""
    current = sc.dataset if isinstance(sc.dataset, SourceSpec) else None
    if data.path is None and current is None:
        for flag, given in (("--data-format", data.layout), ("--strict-data", data.strict)):
            if given:
                raise UsageError(f"{flag} applies to an imported dataset: add --data PATH (or set [dataset] "
                                 f"source in the scenario)")
        return sc
    if data.scale == "full":
        raise UsageError("--scale full generates a CC3M-size dataset and cannot be combined with --data or "
                         "[dataset] source (an imported dataset has its own size; --samples N limits it)")
    if data.path is not None:
        source = scenario.source_spec(data.path, data.layout, data.strict, samples, "--data")
    elif data.layout or data.strict:
        source = scenario.source_spec(current.root, data.layout or current.layout,
                                      data.strict or current.strict, current.limit,
                                      f"{sc.path} [dataset] source")
    else:
        source = current
    return dataclasses.replace(sc, dataset=source)


def scan_source(sc: scenario.Scenario, data_dir: Path, progress: bool, overrides: Overrides | None = None) -> None:
    """An imported source is scanned now (or its earlier scan read from data_dir): its size,
    corrupt images and image sides are known before the run directory is written. A sample limit
    (--samples) beyond the source's size, or a batch beyond a rank's share, is a UsageError naming
    the flag or field that set it."""
    if not isinstance(sc.dataset, SourceSpec):
        return
    from harness.data.materialise import _writable, scanned

    _writable(Path(data_dir))
    scanned(sc.dataset, data_dir, progress)
    overrides = overrides or Overrides()
    scenario.checked_source_size(
        sc, f"data source {sc.dataset.root}",
        limit_from="--samples" if overrides.samples is not None else f"{sc.path} [dataset] samples",
        batch_from="--batch-size" if overrides.batch_size is not None else f"{sc.path} [training] batch_size")


def import_env(sc: scenario.Scenario) -> dict | None:
    """What env.json records of an imported source (the report's header says it), or None."""
    if not isinstance(sc.dataset, SourceSpec):
        return None
    return {"source": str(sc.dataset.root), **sc.dataset.stats.to_dict()}


def full_scale(sc: scenario.Scenario) -> scenario.Scenario:
    """--scale full: CC3M's size, embeddings and captions only (about 11 KB per sample, no
    JPEG)."""
    if sc.training.workload != "features":
        raise UsageError(f"--scale full generates embeddings only; it needs the features workload, not "
                         f"{sc.training.workload!r}: add --workload features")
    return dataclasses.replace(sc, dataset=dataclasses.replace(sc.dataset, content="features"))
