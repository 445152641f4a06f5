"""Converting in worker processes: results in input order, a bounded number of tasks ahead, an early end that
never hangs."""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from functools import partial

from .convert import Converted, ConvertSettings, Task, convert
from .signals import in_worker


def _convert_task(task: Task, settings: ConvertSettings) -> tuple[int, Converted]:
    return task.position, convert(task, settings)


def converted(tasks: Iterator[Task], settings: ConvertSettings, workers: int) -> Iterator[tuple[int, Converted]]:
    """Converts in ``workers`` processes, results in input order, at most ``4 * workers`` tasks ahead.

    Not ``multiprocessing.Pool``: its ``terminate()`` on an early end (``on_error="raise"``, Ctrl-C) kills workers
    that may hold its result queue's lock mid-send, and its task thread then waits for that lock for ever (a pack
    that never ended). The executor's workers finish their task and stop; the tasks not started are dropped.
    """
    work = partial(_convert_task, settings=settings)
    if workers == 1:
        yield from map(work, tasks)
        return
    fork = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(workers, mp_context=fork, initializer=in_worker)
    ahead: deque[Future] = deque()
    try:
        for task in tasks:
            ahead.append(pool.submit(work, task))
            if len(ahead) >= 4 * workers:
                yield ahead.popleft().result()
        while ahead:
            yield ahead.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["converted"]
