"""``python -m gpupipe.pack``: image folders into validated, DALI-friendly shards.

The flow: list the inputs (an image folder, a file list, a segmentation
folder or COCO annotations), put them in a fixed shuffled order (so every
shard mixes the classes), check and normalise each one in worker processes
(``convert``), and append them in that order to shards that roll over
by size (``writer``). A journal records every finished shard, so a
rerun continues after the last one and gives the same bytes as an
uninterrupted run; a lock keeps a second packer out (``journal``). The
manifest is written last (``manifest``). Under ``torchrun`` every rank
packs its own contiguous part of the inputs into its own shards, and rank
0 writes the manifest once every part is done (``packer``). [`verify`][gpupipe.pack.verify]
checks a packed folder; ``upload`` sends one to object storage.
"""

from ..shards.format import is_packed
from .check import verify
from .convert import ConvertSettings
from .journal import NothingPacked, PackError
from .packer import PackSettings, PackSummary, pack, packable, parse_size

__all__ = [
    "pack",
    "verify",
    "PackSettings",
    "ConvertSettings",
    "PackSummary",
    "PackError",
    "NothingPacked",
    "parse_size",
    "packable",
    "is_packed",
]
