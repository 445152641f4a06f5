"""Red team (loader lifecycle): cases that kill processes or fork, run in a process of their own.

``python redteam_lifecycle_worker.py CASE FOLDER BACKEND`` prints one JSON line of what it saw; the tests in
``test_redteam_lifecycle.py`` start it with a timeout (a hang fails the test, not the suite).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import warnings


import gpupipe


def labels(loader_or_pass) -> list[int]:
    return [int(v) for _, targets in loader_or_pass for v in targets]


def build(folder: str, backend: str, **kwargs):
    """A loader of ``folder`` on ``backend`` (``torchvision-transform``: a transform gpupipe cannot compile, run as
    it is); batches of 4, 1 thread (or worker process) unless ``kwargs`` say otherwise."""
    kwargs = {"batch_size": 4, "num_threads": 1, "device": "cpu", **kwargs}
    if backend == "torchvision-transform":
        import torchvision.transforms.functional as F

        class Own:  # not compilable: run as it is, in DataLoader workers of each pass
            def __call__(self, image):
                return F.to_tensor(image.resize((16, 16)))

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return gpupipe.loader(folder, Own(), fallback="torchvision", **kwargs)
    return gpupipe.loader(folder, "val", backend=backend, **kwargs)


def worker_killed(folder: str, backend: str) -> dict:
    """A DataLoader worker killed (SIGKILL) mid-epoch: a clear error, then the next pass reads a whole epoch."""
    import psutil

    loader = build(folder, backend, num_threads=2, shuffle=False)
    expected = labels(loader)
    batches = iter(loader)
    next(batches)
    psutil.Process().children()[0].kill()
    seen: dict = {"expected": expected}
    try:
        time.sleep(0.5)  # torch's SIGCHLD handler may raise here already
        for _ in batches:
            pass
        seen["first"] = "no error"
    except RuntimeError as err:
        seen["first"] = str(err)
    seen["next_pass"] = [labels(loader), labels(loader)]
    loader.close()
    seen["children_after_close"] = len(psutil.Process().children())
    return seen


def forked(folder: str, backend: str) -> dict:
    """A loader mid-pass when the process forks: the child reads on the inherited pass (refused: its workers
    are the parent's), then a new pass (its own workers; a DALI loader is refused), drops the loader and exits
    as a forked child does (the interpreter shuts down); the parent's pass and the epochs after it are whole."""
    loader = build(folder, backend, num_threads=2, shuffle=False)
    expected = labels(loader)
    batches = iter(loader)
    first = labels([next(batches)])
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(reader)
        signal.alarm(60)  # a hang ends the child
        got: dict = {}
        for name, read in (("inherited pass", lambda: labels(batches)), ("new pass", lambda: labels(loader))):
            try:
                got[name] = read()
            except gpupipe.Error as err:
                got[name] = f"{type(err).__name__}: {err}"
        del loader, batches
        os.write(writer, json.dumps(got).encode())
        os.close(writer)
        sys.exit(0)  # a normal exit: atexit handlers and the interpreter's teardown run
    os.close(writer)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(reader) as pipe:
        child = json.loads(pipe.read() or "null")
    rest = first + labels(batches)
    return {"expected": expected, "child": child, "child_status": status, "parent": [rest, labels(loader)]}


def collected_in_a_cycle(folder: str, backend: str) -> dict:
    """A loader and its pass, left mid-pass inside a reference cycle, freed by the cyclic garbage collector (as a
    trainer object holding itself is): the workers must stop at once. torch's wait for them is made 10 minutes
    long here (``MP_STATUS_CHECK_INTERVAL``), so a shutdown that waits on the workers hangs (the test's timeout)
    instead of costing 5 s per worker; the collection ran the index queues' finalizers first, so the workers
    never got torch's stop message."""
    import gc

    import psutil
    import torch.utils.data._utils

    torch.utils.data._utils.MP_STATUS_CHECK_INTERVAL = 600.0
    loader = build(folder, backend, num_threads=2, shuffle=False)
    expected = labels(loader)
    batches = iter(loader)
    next(batches)
    trainer: dict = {"loader": loader, "batches": batches}
    trainer["self"] = trainer
    started = len(psutil.Process().children())
    del loader, batches, trainer
    gc.collect()
    after = len(psutil.Process().children())
    return {
        "started": started,
        "after": after,
        "next": labels(build(folder, backend, shuffle=False)),
        "expected": expected,
    }


if __name__ == "__main__":
    case, folder, backend = sys.argv[1:4]
    cases = {"worker_killed": worker_killed, "forked": forked, "collected_in_a_cycle": collected_in_a_cycle}
    print(json.dumps(cases[case](folder, backend)), flush=True)
