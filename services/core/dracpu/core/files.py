"""Whole-or-nothing file replacement: the one way dracpu replaces a file other processes read.

`write_atomic` writes a temp file in the target's own folder (a rename is atomic only within
one file system) and renames it over the target, so a reader sees the old file or the new one,
never a part. With `durable=True` it also fsyncs the file before the rename and the folder
after it, so the new file survives a power cut or a kill -9 once the call returns; without,
the rename is still atomic but a crash may bring back the old file (or none). The file is
made durable with fdatasync, not fsync: it flushes the data and the size, all a reader needs,
and skips the timestamps, about a quarter of a durable write on ext4; the rename's durability
is the folder's fsync.

What each caller chose, and why:

- claim records and the node file of the allocator (`dracpu.allocator.store`): durable. A
  prepare is acknowledged only after its record is on disk; the state after a crash is
  rebuilt from them.
- CDI specs, the allocator's (`dracpu.allocator.store.cdi`) and the dra-plugin's with its
  device metadata (`dracpu.dra_plugin.kubelet.metadata`): not durable. They are derived from
  the records, and what a power cut takes from them is written again before a container is
  given one: the allocator writes the spec of every record at start where it is missing or
  differs, and the kubelet, restarted after the cut, prepares every claim again before it
  starts a container (a claim it reads back from its checkpoint counts as not prepared). On
  a node whose `/var/run` is a tmpfs the cut takes them all anyway. The allocator's spec is
  still removed durably at unprepare, before the record: a spec left without its record would
  be read back at start as a claim.
- the runtime stand-in's containers (`dracpu.dev.runtime_process`): durable. They are the
  input a restarted development node starts from, as a runtime's are.
- the kubeconfig the API-server fake writes (`dracpu.dev.apiserver`): not durable. It names a
  process a power cut ends, and is written again when the fake starts.
- the development supervisor's status file (`dracpu.dev.supervisor`): not durable. It is
  rewritten on every change and describes processes a power cut ends.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

# The temp name ends in this, never in .json or .yaml: the runtime's CDI cache and the
# folders' scanners load only those, so a partial file is never read.
TEMP_SUFFIX = ".tmp"


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make the folder's entries (a rename, a removal) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    durable: bool,
    mode: int = 0o644,
    temp_suffix: str = TEMP_SUFFIX,
) -> None:
    """Replace `path` by `data` whole (see the module docstring for `durable`). The file gets
    `mode`; the temp file is `.<name>.<random><temp_suffix>` beside it and is removed when the
    write fails. A missing folder is made (with its parents)."""
    target = Path(path)
    directory = target.parent
    try:
        fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=temp_suffix)
    except FileNotFoundError:
        # The common case (folder there) costs no extra system call.
        directory.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=temp_suffix)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fdatasync(handle.fileno())
        os.chmod(temp, mode)
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    if durable:
        fsync_dir(directory)


def remove_durable(path: str | os.PathLike[str]) -> bool:
    """Remove `path` (absent is fine) and make the removal durable. True if it existed."""
    target = Path(path)
    try:
        target.unlink()
    except FileNotFoundError:
        return False
    fsync_dir(target.parent)
    return True


def remove_stale_temps(
    directory: str | os.PathLike[str], name_prefix: str, temp_suffix: str = TEMP_SUFFIX
) -> list[str]:
    """Temp files left by writes a crash cut short (only those of files named `name_prefix*`)."""
    removed: list[str] = []
    folder = Path(directory)
    if not folder.is_dir():
        return removed
    for path in folder.glob(f".{name_prefix}*{temp_suffix}"):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path.name)
    return removed
