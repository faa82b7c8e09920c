"""The strategy registry: one protocol per axis, parameter validation, plugins and entry points."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from strategies import registry
from strategies.protocols import (
    PROTOCOLS,
    Batching,
    BatchingBase,
    Cache,
    Loader,
    Sampler,
    SamplerBase,
    Storage,
    StorageBase,
    members,
    missing,
)


@pytest.fixture
def isolated(monkeypatch):
    """The registry as it is now; whatever a test registers is gone afterwards, and so are the plugin modules
    it imported (so that a later import of a plugin registers it again)."""
    registry.load_builtins()
    monkeypatch.setattr(registry, "_REGISTRY", {a: dict(d) for a, d in registry._REGISTRY.items()})
    before = set(sys.modules)
    yield
    for module in set(sys.modules) - before:
        if module.startswith(("tests.plugins", "dlbench_")):
            del sys.modules[module]


def test_protocol_member_names():
    """The exact members the harness calls; changing one is changing the harness's contract."""
    assert members(Storage) == ["files", "name", "open", "shards", "variant", "write"]
    assert members(Cache) == ["close", "level", "scope", "wrap"]
    assert members(Batching) == ["batch_sampler", "observe", "splits_on_oom"]
    assert members(Sampler) == ["cost", "sampler", "uses_shards"]
    assert members(Loader) == ["in_process", "kind", "pipeline", "prefetch", "side_stream", "threads"]


def check_conforms(axis: str, name: str) -> None:
    strategy = registry.create(axis, name)
    assert isinstance(strategy, PROTOCOLS[axis]) and missing(strategy, PROTOCOLS[axis]) == []
    registry.validate(axis, name, {})  # defaults are valid


@pytest.mark.parametrize("axis, name", [(a, n) for a in registry.AXES for n in registry.names(a)])
def test_every_builtin_strategy_satisfies_its_protocol(axis, name):
    check_conforms(axis, name)


def test_the_seed_plugin_strategies_satisfy_their_protocols(isolated):
    registry.load_plugin("tests.plugins.seed_strategies")
    check_conforms("sampler", "seed_balance")
    check_conforms("batching", "uneven")


def test_base_classes_supply_the_optional_members():
    class Plain(BatchingBase):
        def batch_sampler(self, sampler, batch_size, **context):
            return [list(sampler)]

    assert isinstance(Plain(), Batching) and Plain.splits_on_oom is False and Plain().observe(0.5) is None
    assert not isinstance(object(), Batching)
    assert SamplerBase.cost == "auto"
    assert SamplerBase.uses_shards is False and StorageBase.variant == "" and StorageBase().shards("x") is None


@pytest.mark.parametrize("axis, name, params, message", [
    ("cache", "lru", {"capacity_MB": 64},
     "cache strategy 'lru' has no parameter 'capacity_MB'; accepted: capacity_mb, level, scope"),
    ("batching", "fixed", {"size": 4}, "batching strategy 'fixed' has no parameter 'size'; accepted: none"),
    ("cache", "lru", {"capacity_mb": -1},
     "cache strategy 'lru': capacity_mb must be a finite number >= 0, got -1"),
    ("cache", "lru", {"scope": "node"},
     "cache strategy 'lru': scope must be one of worker, shared; got 'node'"),
    ("batching", "dynamic", {"max_batch": "64"},
     "batching strategy 'dynamic': max_batch must be an integer >= 0, got '64'"),
    ("batching", "adaptive", {"low": 0.9, "high": 0.5},
     "batching strategy 'adaptive': need low < high, got low=0.9 high=0.5"),
    ("sampler", "balanced", {"cost": "flops"},
     "sampler strategy 'balanced': cost must be one of auto, pixels, bytes; got 'flops'"),
    ("storage", "hdf5", {"chunk_rows": 2.5},
     "storage strategy 'hdf5': chunk_rows must be an integer >= 1, got 2.5"),
])
def test_validate_message_is_one_line(axis, name, params, message):
    with pytest.raises(registry.InvalidParams) as err:
        registry.validate(axis, name, params)
    assert str(err.value) == message


def test_validate_accepts_good_parameters():
    registry.validate("cache", "lru", {"capacity_mb": 8, "scope": "shared", "level": "decoded"})
    registry.validate("batching", "dynamic", {"max_batch": 64, "bucket": False, "budget_fraction": 1})


def test_plugin_strategies_get_the_same_check(isolated):
    registry.load_plugin("tests.plugins.seed_strategies")
    with pytest.raises(registry.InvalidParams, match="^sampler strategy 'seed_balance' has no parameter "
                                                     "'weights'; accepted: none$"):
        registry.validate("sampler", "seed_balance", {"weights": [1]})

    @registry.register("batching", "halves")
    class Halves(BatchingBase):
        def __init__(self, factor: int = 2):
            if factor < 1:
                raise ValueError(f"factor must be >= 1, got {factor}")

        def batch_sampler(self, sampler, batch_size, **context):
            return [list(sampler)]

    registry.validate("batching", "halves", {"factor": 3})
    with pytest.raises(registry.InvalidParams, match="^batching strategy 'halves': factor must be >= 1, got 0$"):
        registry.validate("batching", "halves", {"factor": 0})


def test_a_strategy_missing_protocol_members_is_rejected(isolated):
    @registry.register("sampler", "bare")
    class Bare:  # no cost, no base class
        def sampler(self, size, num_replicas, rank, seed, costs, batch_size):
            return range(size)

    with pytest.raises(registry.InvalidParams,
                       match="^sampler strategy 'bare' does not implement the sampler protocol: missing cost"):
        registry.validate("sampler", "bare", {})


def test_any_keyword_factory_skips_the_key_check_but_not_construction(isolated):
    @registry.register("sampler", "loose")
    class Loose(SamplerBase):
        def __init__(self, **params):
            if params:
                raise TypeError(f"unexpected {sorted(params)}")

        def sampler(self, size, num_replicas, rank, seed, costs, batch_size):
            return range(size)

    with pytest.raises(registry.InvalidParams, match=r"^sampler strategy 'loose': unexpected \['x'\]$"):
        registry.validate("sampler", "loose", {"x": 1})


def write_distribution(root: Path, dist: str, entry: str, module: str | None, source: str = "") -> None:
    info = root / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\n{entry}\n")
    if module is not None:
        (root / f"{module}.py").write_text(source)


def test_entry_point_strategies_are_loaded_with_the_builtins(tmp_path, monkeypatch, isolated):
    write_distribution(tmp_path, "dlbench-extra", "extra = dlbench_extra_strategies", "dlbench_extra_strategies",
                       "from strategies.protocols import SamplerBase\n"
                       "from strategies.registry import register\n\n"
                       "@register('sampler', 'from_entry_point')\n"
                       "class FromEntryPoint(SamplerBase):\n"
                       "    def __init__(self, stride: int = 1):\n"
                       "        self.stride = stride\n\n"
                       "    def sampler(self, size, num_replicas, rank, seed, costs, batch_size):\n"
                       "        return range(rank, size, num_replicas)\n")
    assert "from_entry_point" not in registry.names("sampler")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "from_entry_point" in registry.names("sampler")
    with pytest.raises(registry.InvalidParams, match="has no parameter 'step'; accepted: stride$"):
        registry.validate("sampler", "from_entry_point", {"step": 2})


def test_a_broken_entry_point_is_one_line_naming_it(tmp_path, monkeypatch):
    write_distribution(tmp_path, "dlbench-broken", "broken = dlbench_no_such_module", None)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(registry.PluginError) as err:
        registry.names("cache")
    assert str(err.value) == ("entry point broken = dlbench_no_such_module of dlbench-broken (group "
                              "dlbench.strategies) failed to import: ModuleNotFoundError: No module named "
                              "'dlbench_no_such_module'")
