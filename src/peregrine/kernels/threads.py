"""The native backend's worker threads: one pool per thread count, shared by the forest and
row kernels (ctypes releases the GIL while a kernel runs, so threads scale)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import cache


@cache
def pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="peregrine-native")
