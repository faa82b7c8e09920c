"""workers: torch's DataLoader with the scenario's worker processes (``[training] workers``)."""
from __future__ import annotations

from strategies.params import flag
from strategies.protocols import LoaderBase
from strategies.registry import register


@register("loader", "workers")
class WorkerLoader(LoaderBase):
    kind = "workers"

    def __init__(self, side_stream: bool = False) -> None:
        self.side_stream = flag("side_stream", side_stream)
