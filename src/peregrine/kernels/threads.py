"""The native backend's worker threads: one pool per thread count, shared by the forest and
row kernels (ctypes releases the GIL while a kernel runs, so threads scale)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from functools import cache


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@cache
def pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="peregrine-native")
