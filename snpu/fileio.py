"""Atomic file output: write beside the target, then rename.

An error or a crash part-way leaves the previous contents, never a half-written output
(:func:`atomic_write` for files, :func:`temp_dir_beside` + :func:`replace_dir` for
directories).  Which existing paths a command may replace at all is decided by
:mod:`snpu.outputs`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: the process's umask, read once (reading it means setting it, which is not thread-safe)
_UMASK = _read_umask()


def atomic_write(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` through a temporary file beside it and a rename."""
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600: give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def temp_dir_beside(path: str | os.PathLike) -> Path:
    """A new empty directory next to ``path`` (same filesystem, so it can be renamed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    tmp.chmod(0o777 & ~_UMASK)  # mkdtemp makes 0700: give the usual permissions
    return tmp


def replace_dir(tmp: Path, path: Path) -> Path:
    """Move the finished directory ``tmp`` to ``path``.  A previous ``path`` is first renamed
    aside and deleted only after the new one is in place, so at every moment ``path`` holds
    either the old output or the new one."""
    old = None
    if path.exists() or path.is_symlink():
        old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
        os.rmdir(old)
        os.replace(path, old)
    try:
        os.replace(tmp, path)
    except BaseException:
        if old is not None:
            os.replace(old, path)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink()
    return path
