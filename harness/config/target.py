"""The hardware a run's answer is for (the target), when it is not this machine: a `[target]` table
in the scenario, or `--target FILE` (a TOML file holding a `[target]` table, or its keys at the top
level).

    [target]
    nodes = 1                 # nodes, on one shared storage
    gpus_per_node = 4         # ranks per node
    cores_per_node = 32       # CPU cores per node for the ranks and their loaders
    accelerator = "V100-16GB" # in scenarios/accelerators.toml; default: the scenario's
    storage_read_mb_s = 2000  # the shared storage's read bandwidth, all nodes (0: unlimited)
    storage_latency_ms = 0.5  # per read request on a cold read
    storage_iops = 0          # read requests/s the storage serves, all nodes (0: unlimited)
    page_cache = "warm"       # "warm": the data is in the page cache; "cold": read from storage
    workers_per_rank = 4      # default: the scenario's [training] workers
    batch_size = 32           # per rank; default: the scenario's
    prefetch = 2              # batches in flight per worker; default: scenario's prefetch_factor

harness.analysis.targetmodel predicts what a cell would do there (docs/prediction.md).
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.config.accelerators import load_catalogue
from harness.config.scenariofields import number
from harness.errors import UsageError

PAGE_CACHE = ("warm", "cold")
_INTS = ("nodes", "gpus_per_node", "workers_per_rank", "batch_size", "prefetch")
_FLOATS = ("cores_per_node", "storage_read_mb_s", "storage_latency_ms", "storage_iops")
KEYS = _INTS + _FLOATS + ("accelerator", "page_cache", "name")
_LEAST = {"nodes": 1, "gpus_per_node": 1, "batch_size": 1, "prefetch": 1}  # the others: 0 (cores: above 0)
_MOST_COUNT, _MOST = 10**6, 1e9  # counts, and cores, MB/s, ms or IOPS, above these describe no machine


@dataclass(frozen=True)
class Target:
    """A described target. Counts are whole numbers; 0 bandwidth or operations per second:
    unlimited."""

    nodes: int = 1
    gpus_per_node: int = 1
    cores_per_node: float = 1.0
    accelerator: str = ""
    storage_read_mb_s: float = 0.0
    storage_latency_ms: float = 0.0
    storage_iops: float = 0.0
    page_cache: str = "warm"
    workers_per_rank: int = 1
    batch_size: int = 32
    prefetch: int = 2
    name: str = ""

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node

    def describe(self) -> str:
        """One line for a run's header."""
        storage = (f"storage {self.storage_read_mb_s:g} MB/s" if self.storage_read_mb_s else "storage unlimited")
        storage += f", {self.storage_latency_ms:g} ms/request" if self.storage_latency_ms else ""
        storage += f", {self.storage_iops:g} IOPS" if self.storage_iops else ""
        return (f"TARGET{' ' + self.name if self.name else ''}: {self.nodes} node(s) x {self.gpus_per_node} "
                f"{self.accelerator}, {self.cores_per_node:g} cores/node, {storage}, page cache "
                f"{self.page_cache}, {self.workers_per_rank} workers/rank, batch {self.batch_size}/rank "
                "(modelled: docs/prediction.md)")


def parse(raw: dict, where: str, defaults: dict | None = None) -> Target:
    """A Target from a [target] table; `where` names it in errors; `defaults` fills what it leaves
    out (accelerator, workers_per_rank, batch_size, prefetch: the scenario's)."""
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: [target] must be a table of keys, got {raw!r}")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)} in [target]; known: {', '.join(KEYS)}")
    values = {**(defaults or {}), **raw}
    for key in _INTS + _FLOATS:
        if key in values:
            values[key] = number(values[key], f"{where}: [target] {key}", whole=key in _INTS,
                                 least=_LEAST.get(key, 0), above=key == "cores_per_node",
                                 most=_MOST_COUNT if key in _INTS else _MOST,
                                 remedy=f"fix {key} in [target]")
    for key in ("accelerator", "page_cache", "name"):
        if key in values and not isinstance(values[key], str):
            raise UsageError(f"{where}: [target] {key} = {values[key]!r} must be a string; fix {key} in [target]")
    if values.get("page_cache", "warm") not in PAGE_CACHE:
        raise UsageError(f"{where}: [target] page_cache = {values['page_cache']!r} must be one of "
                         f"{', '.join(PAGE_CACHE)}")
    catalogue = load_catalogue()
    if values.get("accelerator", "") not in catalogue:
        raise UsageError(f"{where}: [target] accelerator = {values.get('accelerator', '')!r} is not in the "
                         f"catalogue; known: {', '.join(catalogue)}")
    return Target(**values)


def scenario_defaults(scenario) -> dict:
    """What a target leaves out comes from the scenario."""
    tr = scenario.training
    return {"accelerator": scenario.accelerator.name, "workers_per_rank": tr.workers,
            "batch_size": tr.batch_size, "prefetch": tr.prefetch_factor,
            "gpus_per_node": scenario.world_size}


def load_file(path: str | Path, defaults: dict | None = None) -> Target:
    """--target FILE: a TOML file with a [target] table (or the table's keys at its top level)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise UsageError(f"--target {path}: no such file; give a TOML file with a [target] table") from None
    except tomllib.TOMLDecodeError as err:
        raise UsageError(f"--target {path}: not valid TOML ({err})") from None
    return parse(data.get("target", data), str(path), defaults)


def of_scenario(scenario, target_file: str | Path | None = None) -> Target | None:
    """The run's target: --target FILE, else the scenario's [target] table, else None (this
    machine)."""
    defaults = scenario_defaults(scenario)
    if target_file:
        return load_file(target_file, defaults)
    raw = getattr(scenario, "target", None)
    if raw is None:
        return None
    return parse(raw, f"{getattr(scenario, 'path', scenario.name)} [target]", defaults)
