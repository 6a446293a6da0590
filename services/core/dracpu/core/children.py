"""Child processes that end with the process that started them.

Linux can send a child a signal when its parent ends (prctl PR_SET_PDEATHSIG), but the call has
to be made in the child. Python's way to run code there, `preexec_fn`, makes subprocess fork
the whole process and run Python in the copy before exec. In a process where gRPC is busy (a
supervisor checking its services' health, a test driving them) gRPC's own after-fork handlers
then run in that copy and often crash it (SIGSEGV or SIGABRT, "Check failed:
wakeup_fd_->Wakeup().ok()") before the program is even started: about one child in three with
three health checks in flight.

So the signal is set by util-linux's `setpriv --pdeathsig`, which the child executes first and
which then executes the program: no Python runs in the child, and subprocess keeps its
fork-free spawn. The signal is sent when the thread that started the child ends, so start
children from the thread that lives as long as they should (the event loop's).
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import signal
from collections.abc import Sequence


@functools.cache
def _setpriv() -> str | None:
    return shutil.which("setpriv")


def available() -> bool:
    """Whether children can be tied to their parent here (setpriv is installed)."""
    return _setpriv() is not None


def tied_to_parent(
    argv: Sequence[str], on_parent_death: signal.Signals = signal.SIGTERM
) -> list[str]:
    """`argv` run so that it receives `on_parent_death` when its parent ends; `argv` itself
    where setpriv is missing (see `available`). A program that cannot be run raises the OSError
    its exec would (setpriv would otherwise report it as its own exit status)."""
    setpriv = _setpriv()
    if setpriv is None:
        return list(argv)
    _check_runnable(argv[0])
    return [setpriv, f"--pdeathsig={on_parent_death.name.removeprefix('SIG')}", "--", *argv]


def _check_runnable(program: str) -> None:
    """Raise what exec would for `program`, looked up on this process's PATH."""
    if shutil.which(program) is not None:
        return
    code = errno.EACCES if os.sep in program and os.path.exists(program) else errno.ENOENT
    raise OSError(code, os.strerror(code), program)
