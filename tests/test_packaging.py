"""The torch the project accepts and the one a CPU machine installs: a range that admits the tested releases
(2.11 on the GPU machine, 2.13 here), a constraints file that pins the CPU build inside it, and the README's
commands and CI installing with it: CI runs the README's test command as written and installs nothing else."""
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


def _readme_commands() -> list[str]:
    """The commands of the README's first code block ("Two commands"), each without its trailing comment."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    return [ln.split("   #", 1)[0].strip() for ln in block.splitlines() if ln.strip()]


def _readme_test_command() -> str:
    tests = [c for c in _readme_commands() if "pytest" in c]
    assert len(tests) == 1, f"the README's first code block should hold one test command: {tests}"
    return tests[0]


def _code(path: Path) -> list[str]:
    """A shell script's lines without comments (a `#` after a space starts one; the scripts here quote none)."""
    lines = []
    for ln in path.read_text().splitlines():
        code = ln.split(" #", 1)[0].strip() if not ln.lstrip().startswith("#") else ""
        if code:
            lines.append(code)
    return lines


def test_the_readme_commands_and_ci_install_with_the_constraints():
    installs = [c for c in _readme_commands() if c.startswith("pip install")]
    assert len(installs) == 2 and all("-c constraints-cpu.txt" in c for c in installs)
    test = _readme_test_command()
    assert "pip install --no-deps -r requirements-nodeps.txt" in test  # litdata, which declares torchvision
    assert (REPO / "requirements-nodeps.txt").exists()


def test_ci_runs_the_readme_test_command_as_written_and_installs_nothing_else():
    """.ci/run and the README's test command cannot drift: CI runs that exact line, and no other line of .ci/run
    installs a package or makes an environment (what the tests need, the README's command installs)."""
    test = _readme_test_command()
    ci = _code(REPO / ".ci" / "run")
    assert ci.count(test) == 1, f".ci/run must run the README's test command as written: {test}"
    others = [ln for ln in ci if ln != test]
    assert not [ln for ln in others if "pip" in ln.split() or "venv" in ln or "pip install" in ln], others
    assert not [ln for ln in others if "pytest" in ln], others  # the suite runs once, through that line
    assert (REPO / "docs" / "testing.md").read_text().count(test) == 1  # the testing page shows the same line


def test_the_litdata_extras_agree_with_requirements_nodeps():
    """litdata itself is installed --no-deps (requirements-nodeps.txt); `test` brings its other dependencies
    (litdata-deps), and the `litdata` extra, for a torch that has a matching torchvision, is the two together."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    nodeps = [Requirement(ln.strip()) for ln in (REPO / "requirements-nodeps.txt").read_text().splitlines()
              if ln.strip() and not ln.startswith("#")]
    assert [r.name for r in nodeps] == ["litdata"]
    assert "dlbench[litdata-deps]" in extras["test"]
    assert sorted(extras["litdata"]) == sorted([str(nodeps[0]), "dlbench[litdata-deps]"])
    deps = {Requirement(d).name for d in extras["litdata-deps"]}
    assert {"lightning-utilities", "obstore", "tifffile", "boto3", "requests"} <= deps
    assert not deps & {"torch", "torchvision", "litdata"}
