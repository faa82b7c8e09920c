"""Every file the harness writes into a folder the user named (a run directory, a dashboard folder,
a data directory, a mirror) goes through here, under one rule: no write leaves that folder, and
none goes through a symbolic link.

- The path, resolved, lies under the folder (`root`, by default the file's own folder), and nothing
  between the folder and the file (the file itself, or a folder on the way) is a symbolic link: a
  link in the way is refused with a UsageError, one line naming it and the remedy (remove the
  link). The folder itself may be a link: the user named it.
- A whole file is written to a fresh temporary file beside it (created with O_EXCL and O_NOFOLLOW,
  so that it never opens a planted link), then renamed over its name: a reader sees the old file or
  the new one, and a link planted at the name after the check is replaced, never written through.
- A file appended to (a .jsonl file, a lock file) is opened with O_APPEND and O_NOFOLLOW: a link
  planted at its name after the check is refused by the kernel too.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

from harness.errors import UsageError

APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
FRESH = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _refuse(path: Path, why: str) -> UsageError:
    return UsageError(f"{path}: {why}; the harness writes nothing through a symbolic link or outside the folder "
                      f"it was given: remove the link (or write into a folder without one) and run again")


def checked(path: Path | str, root: Path | str | None = None) -> Path:
    """`path` when it may be written under `root` (default: its own folder): resolved under it, and
    no symbolic link between the two; else the one-line UsageError."""
    path = Path(path)
    root = Path(root) if root is not None else path.parent
    rel = Path(os.path.relpath(os.path.abspath(path), os.path.abspath(root)))
    if rel.parts[:1] == ("..",) or rel.is_absolute() or rel == Path("."):
        raise _refuse(path, f"this path is not inside {root}")
    here = root
    for part in rel.parts:
        here = here / part
        if here.is_symlink():
            what = "it" if here == path else f"the folder {here} on its way"
            raise _refuse(path, f"{what} is a symbolic link (to {os.readlink(here)})")
    if not path.resolve().is_relative_to(root.resolve()):
        raise _refuse(path, f"this path leads outside {root}")
    return path


def make_dir(path: Path | str, root: Path | str | None = None) -> Path:
    """The folder `path` (and its missing parents) under `root` (default: its parent), checked
    first; `root` itself is made as it is named."""
    path = Path(path)
    if root is None or os.path.abspath(path) != os.path.abspath(root):
        checked(path, root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_bytes(path: Path | str, data: bytes, root: Path | str | None = None) -> Path:
    """The whole file `path` under `root` (default: its folder): a fresh temporary file, then
    renamed over it."""
    path = checked(path, root)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)  # a leftover of this pid, or a link planted there: removed, never followed
    try:
        fd = os.open(tmp, FRESH, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_text(path: Path | str, text: str, root: Path | str | None = None) -> Path:
    """The whole text file `path` under `root` (default: its folder), as `write_bytes` writes
    it."""
    return write_bytes(path, text.encode("utf-8"), root)


def open_append(path: Path | str, root: Path | str | None = None, binary: bool = False):
    """`path` under `root` (default: its folder) opened for appending (created where missing),
    never through a link."""
    path = checked(path, root)
    try:
        fd = os.open(path, APPEND, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise _refuse(path, "this path became a symbolic link") from None
        raise
    return os.fdopen(fd, "ab" if binary else "a")
