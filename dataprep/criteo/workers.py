"""The workers both passes of the conversion run on: a pool of spawned processes, or this process alone.

`keep_freed_memory` sets glibc's malloc up for the converter's large
temporaries; entry points call it, and the pool's workers do.
"""

import concurrent.futures
import ctypes
import multiprocessing
from typing import Callable, Sequence

MIB = 1 << 20
# glibc's mallopt parameters and the values `keep_freed_memory` sets.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest
_TRIM_THRESHOLD_BYTES = 1 << 30
_TOP_PAD_BYTES = 64 << 20


class _InProcess:
    """The `concurrent.futures` executor interface, running each task at once in this process."""

    def submit(self, fn: Callable, *args) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args))
        except BaseException as e:  # handed to the caller through the future, as a pool would
            future.set_exception(e)
        return future

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        del wait, cancel_futures


def keep_freed_memory() -> None:
    """Asks glibc's malloc to keep freed memory for reuse instead of returning it to the system.

    Every block of lines allocates and frees the same large numpy
    temporaries; when malloc gives them back to the system, the next block
    faults them in again (converting 2M rows on 2 workers: about a million
    page faults, against 50,000 with this). It changes the whole process, so
    entry points call it (the command line, the Processing job) and the
    pool's workers do; a library call leaves its caller's process alone.
    No-op where the C library is not glibc.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
    mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES)
    mallopt(_M_TOP_PAD, _TOP_PAD_BYTES)


def executor_for(workers: int):
    if workers == 1:
        return _InProcess()
    # Spawned, not forked: the caller may have loaded TensorFlow, whose threads do not survive a fork.
    return concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                                  initializer=keep_freed_memory)


def run_tasks(executor, fn: Callable, tasks: Sequence) -> list:
    futures = [executor.submit(fn, task) for task in tasks]
    return [future.result() for future in futures]
