"""docs/architecture.md's layout names every script and every scenario, as test_imports names every module:
each file under scripts/ (*.py and *.sh, any depth) by its path below scripts/ in the `scripts/` entry, each
scenarios/*.toml by its name in the `scenarios/` entry; and every script the scripts entry names exists (below
scripts/, or run_bench.py at the top)."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "architecture.md"


def layout_entries(text: str) -> dict[str, str]:
    """The "## Layout" block's entries: a line indented 4 spaces starts one (`    name/   text`), a line indented
    further continues it."""
    block = text.split("## Layout\n", 1)[1].split("\n## ", 1)[0]
    entries: dict[str, str] = {}
    name = None
    for line in block.splitlines():
        if m := re.match(r"^    (\S+)\s+(.*)$", line):
            name = m.group(1)
            entries[name] = m.group(2)
        elif name and line.startswith("     "):
            entries[name] += " " + line.strip()
    return entries


def named(word: str, text: str) -> bool:
    """`word` stands on its own in `text`, not inside a longer name: `cc3m-cold` is not named by `cc3m-cold-raw`,
    nor `check_run.py` by `gpu/check_run.py`."""
    return re.search(rf"(?<![\w./-]){re.escape(word)}(?![\w-]|\.\w)", text) is not None


def scripts_entry() -> str:
    return layout_entries(PAGE.read_text())["scripts/"]


def test_every_script_is_named_in_the_architecture_page():
    entry = scripts_entry()
    files = [p for ext in ("*.py", "*.sh") for p in (REPO / "scripts").rglob(ext)]
    missing = sorted(str(p.relative_to(REPO / "scripts")) for p in files
                     if "__pycache__" not in p.parts and not named(str(p.relative_to(REPO / "scripts")), entry))
    assert missing == [], f"docs/architecture.md's scripts/ entry does not name: {missing}"


def test_every_scenario_is_named_in_the_architecture_page():
    entry = layout_entries(PAGE.read_text())["scenarios/"]
    missing = sorted(p.stem for p in (REPO / "scenarios").glob("*.toml")
                     if not (named(p.stem, entry) or named(p.name, entry)))
    assert missing == [], f"docs/architecture.md's scenarios/ entry does not name: {missing}"


def test_every_script_the_page_names_exists():
    entry = scripts_entry()
    paths = re.findall(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.(?:py|sh|sbatch))\b", entry)
    gone = sorted(p for p in set(paths) if not ((REPO / "scripts" / p).exists() or (REPO / p).exists()))
    assert paths and gone == [], f"docs/architecture.md's scripts/ entry names scripts that are gone: {gone}"
