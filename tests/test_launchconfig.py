"""One settings object from the command line to the ranks (harness.config.launchconfig): the LaunchConfig holds the
frozen BenchRequest whole, the RankContext (harness.train.trainloop) holds the LaunchConfig whole, and neither
copies a field of the one it holds."""
from __future__ import annotations

import pickle
from dataclasses import fields
from pathlib import Path

from harness import cli
from harness.config import scenario
from harness.config.launchconfig import LaunchConfig
from harness.config.matrix import expand
from harness.config.request import BenchRequest
from harness.device.devices import EmulatedDevice
from harness.train.trainloop import RankContext


def launch_of(*argv: str) -> LaunchConfig:
    argv = ["--scenario", "smoke", *argv]
    request = cli.bench_request(cli.build_parser().parse_args(argv), argv, None)
    sc = scenario.load("smoke", request.overrides.given())
    return LaunchConfig(request, sc, expand(sc), Path("results/run"), "emulated", budget_s=60.0)


def test_the_launch_holds_the_request_whole_and_reaches_a_spawned_rank_pickled():
    config = launch_of("--steps", "3", "--repeats", "2", "--order-seed", "7", "--cache-state", "cold", "--quiet")
    back = pickle.loads(pickle.dumps(config))  # what a spawned rank receives
    assert back == config and back.request == config.request and back.request.cache_state == "cold"
    assert not config.progress and config.request.repeats == 2
    assert config.full_plan() == back.full_plan() and len(config.full_plan()) == 2 * len(config.cells)


def test_no_field_is_copied_by_hand_from_one_carrier_to_the_next():
    request, launch, rank = ({f.name for f in fields(c)} for c in (BenchRequest, LaunchConfig, RankContext))
    # the same names, each a thing settled from the request's: the Scenario of its name, the device its mode
    # chose, the budget it spends
    assert request & launch == {"scenario", "device", "budget_s"}
    assert rank & launch == {"device"}  # the rank's device object, of the kind the launch chose
    assert not rank & request - {"device"}


def test_a_rank_reads_the_run_through_its_context():
    config = launch_of("--steps", "3", "--decompose")
    sc = config.scenario
    ctx = RankContext(1, 2, EmulatedDevice(sc.accelerator, "pixels"), {}, config, local_rank=1)
    assert ctx.scenario is config.scenario and ctx.remote_counters is None and ctx.config.request.decompose
    alone = RankContext.alone(0, 1, sc, EmulatedDevice(sc.accelerator, "pixels"))
    assert alone.scenario is sc and alone.config.request == BenchRequest.bare(sc.name)
    assert alone.config.device == "emulated" and alone.data_paths == {}
