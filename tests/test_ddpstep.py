"""The training step's OOM policy: split into 2, 4, ... micro-batches with gradients equal to the whole
batch's, on a device that plans ahead (emulated) and on one that only raises (a real GPU); without
split_on_oom the error propagates."""
from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch

from harness.train.ddpstep import StepFailed, micro_batches_needed, shadow_step, split, train_step

SAMPLES = 16


class SmallDevice:
    """Holds at most `limit` samples at once. plans=True: fits() tells in advance (the emulated device);
    plans=False: fits() always says yes and begin_step raises (a real GPU)."""

    torch_device = torch.device("cpu")

    def __init__(self, limit: int, plans: bool):
        self.limit, self.plans = limit, plans
        self.begun: list[int] = []  # micro-batch sizes that started
        self.raised = 0

    def fits(self, samples: int, pixels: int) -> bool:
        return samples <= self.limit if self.plans else True

    def begin_step(self, samples: int, pixels: int) -> None:
        if samples > self.limit:
            self.raised += 1
            raise torch.OutOfMemoryError(f"{samples} samples do not fit in {self.limit}")
        self.begun.append(samples)

    def pad(self) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def note_oom(self, samples: int, pixels: int) -> None:
        pass


class Model(torch.nn.Module):
    """A mean-over-samples loss, as the real model's; no_sync as DDP has it (one process: nothing to sync)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(6, 3)

    def forward(self, batch: dict) -> torch.Tensor:
        return (self.linear(batch["x"]) ** 2).mean() + batch["y"].float().mean() * 0

    def no_sync(self):
        return nullcontext()


def batch() -> dict:
    g = torch.Generator().manual_seed(1)
    return {"x": torch.randn(SAMPLES, 6, generator=g), "y": torch.arange(SAMPLES)}


def step(device, split_on_oom: bool) -> tuple[int, list[torch.Tensor], Model]:
    model = Model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: the gradients are what we compare
    handled = train_step(model, optimizer, device, batch(), SAMPLES, SAMPLES * 100, split_on_oom)
    return handled, [p.grad.clone() for p in model.parameters()], model


def whole_batch_gradients() -> list[torch.Tensor]:
    handled, grads, _ = step(SmallDevice(limit=SAMPLES, plans=True), split_on_oom=False)
    assert handled == 0
    return grads


@pytest.mark.parametrize("limit, parts", [(8, 2), (4, 4), (3, 8), (1, 16)])
@pytest.mark.parametrize("plans", [True, False], ids=["emulated", "real-gpu"])
def test_split_into_powers_of_two_with_the_whole_batch_gradients(limit, parts, plans):
    device = SmallDevice(limit, plans)
    handled, grads, _ = step(device, split_on_oom=True)
    assert handled == 1
    size = -(-SAMPLES // parts)
    assert device.begun[-parts:] == [size] * (SAMPLES // size) + ([SAMPLES % size] if SAMPLES % size else [])
    assert sum(device.begun[-parts:]) == SAMPLES
    for got, want in zip(grads, whole_batch_gradients()):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    if plans:
        assert device.raised == 0  # the emulated device said in advance what fits
    else:
        assert device.raised >= 1  # the real GPU was tried: whole, then halves, ...


def test_retries_smaller_micro_batches_after_each_oom():
    device = SmallDevice(limit=4, plans=False)
    step(device, split_on_oom=True)
    assert device.raised == 2  # 16 at once, then 8 (the first half of two), then 4 fit
    assert device.begun == [4, 4, 4, 4]


@pytest.mark.parametrize("plans", [True, False], ids=["emulated", "real-gpu"])
def test_without_split_on_oom_the_forward_oom_reaches_the_caller_not_yet_joined(plans):
    device = SmallDevice(limit=8, plans=plans)
    with pytest.raises(StepFailed) as err:
        step(device, split_on_oom=False)
    assert (err.value.phase, err.value.oom, err.value.joined) == ("forward", True, False)
    assert err.value.reason.startswith("OOM in the forward: 16 samples do not fit")
    assert device.begun == []


def test_a_single_sample_that_does_not_fit_raises():
    with pytest.raises(StepFailed, match="single sample"):
        step(SmallDevice(limit=0, plans=True), split_on_oom=True)


def test_another_error_in_forward_is_a_step_failure_not_an_oom():
    class Broken(Model):
        def forward(self, batch):
            raise RuntimeError("nvjpeg: bad marker")

    with pytest.raises(StepFailed) as err:
        train_step(Broken(), torch.optim.SGD(Broken().parameters(), lr=0.1), SmallDevice(16, True), batch(),
                   SAMPLES, SAMPLES * 100, split_on_oom=True)
    assert (err.value.phase, err.value.oom, err.value.joined) == ("forward", False, False)
    assert err.value.reason == "error in the forward: RuntimeError: nvjpeg: bad marker"


def test_batch_that_fits_is_one_step():
    device = SmallDevice(limit=SAMPLES, plans=False)
    handled, _, _ = step(device, split_on_oom=True)
    assert handled == 0 and device.begun == [SAMPLES]


def test_micro_batches_needed_and_split():
    assert micro_batches_needed(SmallDevice(16, True), 16, 1) == 1
    assert micro_batches_needed(SmallDevice(5, True), 16, 1) == 4
    assert micro_batches_needed(SmallDevice(0, True), 16, 1) == 32  # none fits: more parts than samples
    parts = split({"x": torch.arange(10)}, 10, 4)
    assert [p["x"].tolist() for p in parts] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]


def test_shadow_step_gives_zero_gradients():
    model = Model()
    device = SmallDevice(limit=4, plans=True)
    shadow_step(model, torch.optim.SGD(model.parameters(), lr=0.1), device, batch())
    assert device.begun == [0]
    assert all(torch.count_nonzero(p.grad) == 0 for p in model.parameters())


class RemembersDevice(SmallDevice):
    """A real GPU's device that remembers the smallest batch that ran out (CudaDevice.note_oom) and splits
    later batches that large ahead."""

    memory_model = None
    oom_units = None

    def fits(self, samples: int, pixels: int) -> bool:
        return self.oom_units is None or samples < self.oom_units

    def note_oom(self, samples: int, pixels: int) -> None:
        self.oom_units = samples if self.oom_units is None else min(self.oom_units, samples)


def test_only_steps_that_raised_count_as_oom_events():
    device = RemembersDevice(limit=8, plans=False)
    model = Model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    counts = [train_step(model, optimizer, device, batch(), SAMPLES, SAMPLES * 100, True) for _ in range(3)]
    assert device.raised == 1  # the first step raised; the later ones were split ahead from its memory
    assert counts == [1, 0, 0]
