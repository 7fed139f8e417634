"""How ``write_file`` and ``edit_file`` change a file: a new file beside it, renamed over it.

Writing in place would write through a hard link into whatever file outside the workspace
shares the inode (confinement checks the path, and a hard link has no path to check). A rename
replaces only the directory entry: the other names of the old inode keep the old content.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from dsh.plugin import ToolError

__all__ = ["replace_file"]

#: Never open the temporary file through a symbolic link (where the system can say so).
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def replace_file(path: Path, name: str, data: bytes, root: Path) -> None:
    """Give ``path`` (confined to the workspace ``root``, its directory existing) the content
    ``data``, by writing a new file in its directory and renaming it over ``path``.

    The directory is checked once more just before, as it may have been swapped for a symbolic
    link since the path was confined. The new file keeps the old one's permission bits (a new
    path gets the usual ``0o666`` minus the umask); a failure leaves no temporary file behind.
    ``name`` is the path as the model gave it, for the error messages.
    """
    parent = path.parent
    try:
        if not parent.resolve().is_relative_to(root):
            raise ToolError(
                f"cannot write {name}: its directory now leads outside the workspace {root} "
                "(it was replaced by a symbolic link); give a path inside the workspace",
                "OUTSIDE_WORKSPACE",
            )
        mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else None
        _write_beside(path, data, mode)
    except OSError as exc:
        raise ToolError(f"cannot write {name}: {exc.strerror or exc}", "OS_ERROR") from exc


def _write_beside(path: Path, data: bytes, mode: int | None) -> None:
    temporary = path.parent / f".{path.name}.{secrets.token_hex(6)}.dsh-tmp"
    # O_EXCL: never reuse (or follow) what is already there.
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o666)
    try:
        with open(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
