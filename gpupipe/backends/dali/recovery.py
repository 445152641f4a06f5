"""Finding the sample behind a DALI error: each suspect read in Python and run alone.

A file that fails to decode invalidates the whole pipeline, and with
prefetching the error may come from any batch in flight. The probe reads
each suspect's bytes itself (a missing, emptied or unreadable file is
found there, and blamed on exactly that file) and runs it, with the same
planned parameters, through the same graph in a synchronous pipeline of
batch size 1, so an error belongs to the sample just run. The pipeline is
rebuilt after each error.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

from ...fileio import UnreadableFile

logger = logging.getLogger(__name__)

#: A suspect: ``(sample index, epoch, slot position)``.
Suspect = tuple[int, int, int]


def dali_reason(err: Exception) -> str:
    """The useful line of a DALI error message."""
    text = str(err)
    body = text.split("encountered:", 1)[-1]
    lines = [
        line.strip()
        for line in body.splitlines()
        if line.strip()
        and "pipeline object is no longer valid" not in line
        and "Critical error" not in line
        and not line.strip().startswith("C++ context")
    ]
    line = lines[0] if lines else (text.strip().splitlines() or [type(err).__name__])[0]
    failed = _FAILED_SAMPLE.match(line)  # "sample #0" is the slot in DALI's batch (the probe's: one), not the dataset's
    if failed:
        return f"DALI's decoder refused it: {failed.group(1)}" if failed.group(1) else "DALI's decoder refused it"
    return line


#: DALI's decoder error, naming the sample by its slot in DALI's batch; the rest is the reason, when it gives one.
_FAILED_SAMPLE = re.compile(r"Failed to decode sample #\d+\s*:?\s*(.*)$")


class Prober:
    """Runs suspects one at a time through a probe pipeline.

    Args:
        build: builds a synchronous batch-of-one pipeline whose inputs are
            ``self.current`` (set before each run): ``build(prober) -> pipeline``.
        read: reads a sample's data in Python (raises ``UnreadableFile``).
        prepare: ``prepare(suspect, data)``: the pipeline's inputs for that sample.
    """

    def __init__(self, build: Callable, read: Callable[[int], object], prepare: Callable) -> None:
        self.build = build
        self.read = read
        self.prepare = prepare
        self.current = None

    def probe(self, suspects: list[Suspect]) -> dict[int, str]:
        """``{index: reason}`` of the suspects that fail (each distinct sample is run once)."""
        bad: dict[int, str] = {}
        seen = set()
        pipe = None
        for suspect in suspects:
            index = suspect[0]
            if index in seen:
                continue
            seen.add(index)
            try:
                data = self.read(index)
            except UnreadableFile as err:
                bad[index] = err.reason
                continue
            if pipe is None:
                pipe = self.build(self)
            self.current = self.prepare(suspect, data)
            try:
                pipe.run()
            except RuntimeError as err:
                bad[index] = f"cannot decode: {dali_reason(err)}"
                pipe = None
        logger.info("probed %d samples: %d bad", len(seen), len(bad))
        return bad


def suspects_of(refs) -> list[Suspect]:
    """The real samples of the batches in flight, with their epochs and slots."""
    out: list[Suspect] = []
    for ref in refs:
        out.extend((int(i), ref.epoch, int(p)) for i, p in zip(ref.indices[: ref.count], ref.positions[: ref.count]))
    return out


__all__ = ["Prober", "dali_reason", "suspects_of"]
