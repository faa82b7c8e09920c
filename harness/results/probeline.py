"""probe.jsonl: the machine probe of each repeat (harness.run.probe), one ProbeLine a line, and the run's
series of them (ProbeSeries), which makes throughput comparable across machines (`vs_probe`). Each line
carries its format's version (PROBE_VERSION; harness.results.fileformat reads and writes it: PROBE)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from harness.results.fileformat import FileFormat

# probe.jsonl's format version (written under "schema" in each line), and what each version is:
PROBE_VERSION = 1
PROBE_HISTORY = {
    1: "every probe.jsonl so far: per repeat `repeat`, `ideal_samples_per_s` (the in-memory ideal loader) and "
       "`memcpy_gb_s`; the `schema` key added within version 1 (a line without it is version 1)",
}


@dataclass(frozen=True)
class ProbeLine:
    repeat: int
    ideal_samples_per_s: float  # the in-memory ideal loader: the scenario's samples prepared in one process
    memcpy_gb_s: float  # memory-copy bandwidth

    def to_json(self) -> dict:
        return PROBE.stamped(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, obj: dict) -> ProbeLine:
        return cls(int(obj.get("repeat", 0)), float(obj["ideal_samples_per_s"]), float(obj["memcpy_gb_s"]))


@dataclass
class ProbeSeries:
    """The probe's figures per repeat, in repeat order (what a baseline stores as its "probe")."""

    ideal_samples_per_s: list[float] = field(default_factory=list)
    memcpy_gb_s: list[float] = field(default_factory=list)

    @classmethod
    def from_lines(cls, lines: list[ProbeLine]) -> ProbeSeries:
        ordered = sorted(lines, key=lambda p: p.repeat)
        return cls([p.ideal_samples_per_s for p in ordered], [p.memcpy_gb_s for p in ordered])

    @classmethod
    def from_json(cls, obj: dict | None) -> ProbeSeries:
        obj = obj or {}
        return cls([float(x) for x in obj.get("ideal_samples_per_s") or []],
                   [float(x) for x in obj.get("memcpy_gb_s") or []])

    def to_json(self) -> dict:
        return {"ideal_samples_per_s": list(self.ideal_samples_per_s), "memcpy_gb_s": list(self.memcpy_gb_s)}

    def ideal(self, repeat: int) -> float | None:
        """The repeat's ideal loader samples/s; None when the probe lacks it (or it is not positive)."""
        if 0 <= repeat < len(self.ideal_samples_per_s) and self.ideal_samples_per_s[repeat] > 0:
            return self.ideal_samples_per_s[repeat]
        return None


PROBE = FileFormat("probe.jsonl", PROBE_VERSION, PROBE_HISTORY)
