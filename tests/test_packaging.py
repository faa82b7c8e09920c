"""The torch the project accepts and the one a CPU machine installs: a range that admits the tested releases
(2.11 on the GPU machine, 2.13 here), a constraints file that pins the CPU build inside it, and the README's
commands and CI installing with it."""
from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]


def _torch_requirement() -> Requirement:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(Requirement(d) for d in deps if Requirement(d).name == "torch")


def test_the_declared_torch_range_admits_the_tested_releases_and_is_not_a_pin():
    spec = _torch_requirement().specifier
    for version in ("2.11.0", "2.12.1", "2.13.0", "2.14.1"):
        assert spec.contains(version), version
    assert not spec.contains("2.10.0") and not spec.contains("3.0.0")


def test_the_cpu_constraints_pin_a_build_inside_the_range():
    lines = [ln.strip() for ln in (REPO / "constraints-cpu.txt").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    pin = Requirement(next(ln for ln in lines if ln.startswith("torch")))
    (version,) = [s.version for s in pin.specifier]
    assert _torch_requirement().specifier.contains(version)


def test_the_readme_commands_and_ci_install_with_the_constraints():
    readme = (REPO / "README.md").read_text()
    installs = [ln for ln in readme.splitlines()[:20] if ln.startswith("pip install")]
    assert len(installs) == 2 and all("-c constraints-cpu.txt" in ln for ln in installs)
    ci = (REPO / ".ci" / "run").read_text()
    assert "-c constraints-cpu.txt" in next(ln for ln in ci.splitlines() if "pip install" in ln)
