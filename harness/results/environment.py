"""env.json: the machine, the libraries and the settings of a run, captured once for every command
that writes a run directory (the main run and --loader-only), as one typed record that owns its
JSON.

`LIBRARIES` lists every installed distribution whose version can change a figure: the training and
numerics stack, the decoders, the storages' libraries, the tables' and plots' libraries and NVML. A
library that is not installed is recorded as null. Keys an older or newer harness wrote and this
one does not know are kept (`extra`) and written back unchanged, so a resumed run's env.json loses
nothing. The file is versioned (ENV_VERSION, its history in ENV_HISTORY) and read and written
through harness.results.fileformat (ENV).
"""
from __future__ import annotations

import dataclasses
import os
import platform
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import ClassVar

from harness.data.pagecache import block_device
from harness.measure import gpuinfo, hostload
from harness.measure.jsonrecord import check_shape
from harness.results.fileformat import VERSION_KEY, FileFormat, read_json, write_json

# env.json's format version (written under "schema"), and what each version is:
ENV_VERSION = 1
ENV_HISTORY = {
    1: "every env.json so far: the machine, the libraries' versions, git, and the run's settings (None ones "
       "left out). Added within version 1, absent in older files and read as their defaults: `gpu`, "
       "`data_dir`, `data_device`, `read_ahead_kb`, `import`, `resumed`, `free_threaded`, libraries beyond the "
       "first six; the "
       "`schema` key itself (a file without it is version 1)",
}
REPO = Path(__file__).resolve().parents[2]
LIBRARIES = ("torch", "h5py", "numpy", "pandas", "tabulate", "pillow", "simplejpeg", "pyarrow", "lmdb",
             "webdataset", "matplotlib", "nvidia-ml-py")
RENAMED = {"import": "imported"}  # JSON key -> attribute, where the key is a Python keyword
JSON_KEY = {attribute: key for key, attribute in RENAMED.items()}


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gb() -> float | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError):
        return None


def _git_commit() -> dict:
    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                                  timeout=5).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            return None
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}


def data_dir_of(argv: list[str]) -> Path:
    """--data-dir as the command line gave it (``--data-dir X`` or ``--data-dir=X``), else the
    default data/."""
    for i, arg in enumerate(argv):
        if arg == "--data-dir" and i + 1 < len(argv):
            return Path(argv[i + 1]).absolute()
        if arg.startswith("--data-dir="):
            return Path(arg.split("=", 1)[1]).absolute()
    return REPO / "data"


def free_threaded() -> bool:
    """Whether this interpreter is a free-threaded build (3.13t and later: Py_GIL_DISABLED) running
    with the GIL off (a free-threaded build may turn it back on: PYTHON_GIL=1, or an extension that
    needs it)."""
    if not sysconfig.get_config_var("Py_GIL_DISABLED"):
        return False
    gil_enabled = getattr(sys, "_is_gil_enabled", None)
    return not gil_enabled() if gil_enabled is not None else True


def is_name(text: str) -> bool:
    """A scenario's name as a run records it (its file's stem): no path, no separator, not
    hidden."""
    return bool(text) and "/" not in text and "\\" not in text and "\0" not in text and not text.startswith(".") \
        and not text.endswith(".toml") and len(text) <= 200


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class Environment:
    """What env.json holds. The machine part is captured by `capture`; the run part (scenario and
    below) is set by the command that writes the run directory (None where a command has no such
    setting)."""

    time_utc: str = ""
    command: list[str] = field(default_factory=list)
    python: str = ""
    versions: dict[str, str | None] = field(default_factory=dict)
    platform: str = ""
    hostname: str = ""
    cpu_model: str = ""
    cpu_count: int | None = None
    cpu_affinity: int | None = None
    cpu_allowance: float | None = None  # the CPUs the run may use: affinity capped by its cgroup's quota
    memory_gb: float | None = None
    free_threaded: bool | None = None  # a free-threaded interpreter with the GIL off (None: not recorded)
    gpus: list[str] = field(default_factory=list)
    gpu: dict = field(default_factory=dict)  # gpuinfo.environment(): names, memory, driver, CUDA, cuDNN
    device: dict = field(default_factory=dict)  # mode (emulated / cuda), accelerator, world_size
    git: dict = field(default_factory=dict)
    # where the data lies: --data-dir, the block device behind its filesystem and the device's read-ahead
    # (None where unknown, and in env.json files written before they were recorded)
    data_dir: str | None = None
    data_device: str | None = None
    read_ahead_kb: int | None = None
    # the run's settings
    scenario: str | None = None
    comparable: dict | None = None  # what a baseline must share with the run (analysis.compare)
    dataset: dict | None = None
    cache_state: str | None = None
    repeats: int | None = None
    settings: dict | None = None  # what --resume checks (harness.run.resume)
    argv: list[str] | None = None
    dataset_gb: float | None = None
    imported: dict | None = None  # JSON "import": an imported source's scan (config.runsetup.import_env)
    resumed: list[str] | None = None  # UTC times of each --resume
    min_effect: float | None = None  # --min-effect: the smallest effect that matters, for the run's decisions
    family_alpha: float | None = None  # --family-alpha: the effects' decisions' error rate all together
    budget_s: float | None = None  # the budget the run's looks were planned for (0: none; None: not recorded)
    order_tolerance: float | None = None  # --order-tolerance: how much less random than a shuffle an order may be
    extra: dict = field(default_factory=dict)  # keys this harness does not know, kept as they were

    NON_NEGATIVE: ClassVar[tuple[str, ...]] = (  # checked on read (jsonrecord.check_shape)
        "cpu_count", "cpu_affinity", "cpu_allowance", "memory_gb", "read_ahead_kb", "repeats", "dataset_gb",
        "min_effect", "order_tolerance", "budget_s")

    @property
    def run_cpus(self) -> float | None:
        """The CPUs the run had: its allowance (affinity and cgroup quota), else its affinity, else
        the host's count (env.json files written before the allowance was recorded)."""
        for value in (self.cpu_allowance, self.cpu_affinity, self.cpu_count):
            if value:
                return value
        return None

    @classmethod
    def capture(cls, argv: list[str], device: dict, data_dir: Path | None = None) -> Environment:
        """The machine now; ``data_dir`` (default: --data-dir in ``argv``, else the repository's
        data/) names where the data lies."""
        gpu = gpuinfo.environment()  # devices, names, memory, driver, CUDA runtime, cuDNN (empty without CUDA)
        data = Path(data_dir) if data_dir is not None else data_dir_of(argv)
        name, read_ahead = block_device(data)
        return cls(time_utc=utc_now(), command=[sys.executable, sys.argv[0], *argv],
                   python=platform.python_version(), versions={d: _version(d) for d in LIBRARIES},
                   platform=platform.platform(), hostname=platform.node(), cpu_model=_cpu_model(),
                   cpu_count=os.cpu_count(),
                   cpu_affinity=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
                   cpu_allowance=hostload.cpu_allowance(), free_threaded=free_threaded(),
                   memory_gb=_memory_gb(), gpus=[g["name"] for g in gpu["gpus"]], gpu=gpu, device=device,
                   git=_git_commit(), data_dir=str(data), data_device=name, read_ahead_kb=read_ahead)

    @classmethod
    def from_json(cls, obj: dict) -> Environment:
        """An env.json object of any harness version: missing keys take their defaults, unknown
        ones are kept. A known key's value of another type, a negative count and a scenario that is
        no name (a path) are a ValueError naming the key."""
        check_shape(cls, obj, renamed=RENAMED)
        scenario = obj.get("scenario")
        if scenario is not None and not is_name(scenario):
            raise ValueError(f"scenario = {scenario[:80]!r} is not a scenario's name (a run records its "
                             f"scenario's name, never a path)")
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known, extra = {}, {}
        for key, value in obj.items():
            if key == VERSION_KEY:  # the file's, not the record's (read through ENV, written by to_json)
                continue
            name = RENAMED.get(key, key)
            (known if name in names else extra)[name if name in names else key] = value
        return cls(**known, extra=extra)

    def to_json(self) -> dict:
        """The JSON object, of the current version; a run setting that is None is left out (as the
        harness always wrote it)."""
        out = {}
        for f in dataclasses.fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if value is None and f.name in RUN_SETTINGS:
                continue
            out[JSON_KEY.get(f.name, f.name)] = value
        return ENV.stamped({**out, **self.extra})

    @classmethod
    def read(cls, run_dir: Path) -> Environment:
        """A run directory's env.json, any older version upgraded on read; an empty Environment
        when it does not exist. A damaged or newer file is a
        harness.results.fileformat.ResultsError."""
        env = read_json(Path(run_dir) / "env.json", ENV, cls.from_json)
        return env if env is not None else cls()

    def write(self, run_dir: Path) -> None:
        # atomically: the other ranks of a resumed torchrun run read it meanwhile
        write_json(Path(run_dir) / "env.json", self.to_json(), ENV)

    @property
    def cell_ids(self) -> list[str] | None:
        """The run's cells in the matrix's order, as its settings record them (None for other
        commands)."""
        return (self.settings or {}).get("cells")

    @property
    def torch_version(self) -> str | None:
        return self.versions.get("torch")

    @property
    def machine(self) -> dict:
        """What a baseline records of the machine (report.compare warns when raw throughput crosses
        one)."""
        return {"cpu_model": self.cpu_model, "cpu_count": self.cpu_count, "hostname": self.hostname,
                "memory_gb": self.memory_gb}


RUN_SETTINGS = ("scenario", "comparable", "dataset", "cache_state", "repeats", "settings", "argv", "dataset_gb",
                "imported", "resumed")

ENV = FileFormat("env.json", ENV_VERSION, ENV_HISTORY)
