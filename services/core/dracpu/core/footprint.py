"""What a service gives back once it has started: the garbage of its imports and start-up
collected, the objects that survive frozen, and the heap's free memory returned to the kernel.

Start-up (imports, the first discovery, recovery) allocates far more than a service holds at
idle; glibc keeps freed heap pages mapped, so they count in the pod's memory until trimmed.
Frozen objects are left out of every later collection: the collector then scans only what the
service allocates while it runs, and never writes to the pages of the frozen ones.
"""

from __future__ import annotations

import ctypes
import gc

from dracpu.core.log import get_logger

log = get_logger(__name__)


def _malloc_trim() -> bool:
    """glibc's malloc_trim(0); False where the C library has none (musl, another libc).
    The process's own symbols are searched (ctypes.util.find_library would start processes)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    trim(0)
    return True


def settle() -> None:
    """Call once the service is serving."""
    gc.collect()
    gc.freeze()
    trimmed = _malloc_trim()
    log.info(4, "start-up memory released", frozen=gc.get_freeze_count(), trimmed=trimmed)
