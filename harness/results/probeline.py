"""probe.jsonl: the machine probe of each repeat (harness.run.probe), one ProbeLine a line, and the
run's series of them (ProbeSeries), which makes throughput comparable across machines (`vs_probe`).
Each line carries its format's version (PROBE_VERSION; harness.results.fileformat reads and writes
it: PROBE)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from harness.results.fileformat import FileFormat

# probe.jsonl's format version (written under "schema" in each line), and what each version is:
PROBE_VERSION = 1
PROBE_HISTORY = {
    1: "every probe.jsonl so far: per repeat `repeat`, `ideal_samples_per_s` (the in-memory ideal loader) and "
       "`memcpy_gb_s`; the `schema` key added within version 1 (a line without it is version 1); "
       "`ideal_cpu_samples_per_s` (the ideal loader per CPU second of its thread) added within version 1, "
       "optional; since then `memcpy_gb_s` times each copy by the thread's CPU clock (the same figure where "
       "nothing interrupts the copy)",
}


@dataclass(frozen=True)
class ProbeLine:
    repeat: int
    ideal_samples_per_s: float  # the in-memory ideal loader: the scenario's samples prepared in one process
    memcpy_gb_s: float  # memory-copy bandwidth
    ideal_cpu_samples_per_s: float | None = None  # the ideal loader per CPU second of its thread (added later)

    def to_json(self) -> dict:
        return PROBE.stamped({k: v for k, v in dataclasses.asdict(self).items() if v is not None})

    @classmethod
    def from_json(cls, obj: dict) -> ProbeLine:
        cpu = obj.get("ideal_cpu_samples_per_s")
        return cls(int(obj.get("repeat", 0)), float(obj["ideal_samples_per_s"]), float(obj["memcpy_gb_s"]),
                   None if cpu is None else float(cpu))


@dataclass
class ProbeSeries:
    """The probe's figures per repeat, in repeat order (what a baseline stores as its "probe")."""

    ideal_samples_per_s: list[float] = field(default_factory=list)
    memcpy_gb_s: list[float] = field(default_factory=list)
    ideal_cpu_samples_per_s: list[float] = field(default_factory=list)  # empty: a repeat did not record it

    @classmethod
    def from_lines(cls, lines: list[ProbeLine]) -> ProbeSeries:
        ordered = sorted(lines, key=lambda p: p.repeat)
        cpu = [p.ideal_cpu_samples_per_s for p in ordered]
        return cls([p.ideal_samples_per_s for p in ordered], [p.memcpy_gb_s for p in ordered],
                   [] if None in cpu else cpu)

    @classmethod
    def from_json(cls, obj: dict | None) -> ProbeSeries:
        obj = obj or {}
        return cls(*([float(x) for x in obj.get(k) or []] for k in ("ideal_samples_per_s", "memcpy_gb_s",
                                                                      "ideal_cpu_samples_per_s")))

    def to_json(self) -> dict:
        out = {"ideal_samples_per_s": list(self.ideal_samples_per_s), "memcpy_gb_s": list(self.memcpy_gb_s)}
        return out | ({"ideal_cpu_samples_per_s": list(self.ideal_cpu_samples_per_s)}
                      if self.ideal_cpu_samples_per_s else {})

    def ideal(self, repeat: int) -> float | None:
        """The repeat's ideal loader samples/s; None when the probe lacks it (or it is not
        positive)."""
        if 0 <= repeat < len(self.ideal_samples_per_s) and self.ideal_samples_per_s[repeat] > 0:
            return self.ideal_samples_per_s[repeat]
        return None


PROBE = FileFormat("probe.jsonl", PROBE_VERSION, PROBE_HISTORY)
