"""One torchrun rank of ``test_resume_resplit.py`` (gloo, CPU, torchvision backend).

``save`` (2 ranks): reads 2 batches of 2 of epoch 1 on each rank, rank 0 saves its state (``torch.save``).
``resume`` (3 ranks, new processes): each loads rank 0's state into a loader of batch size 1, reads the rest of
epoch 1, then epoch 2. Each rank writes ``<phase>-<rank>.json`` into the folder given.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parent))
from helpers import sample_ids  # noqa: E402

import gpupipe  # noqa: E402

PLAIN = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]


def main() -> None:
    folder, phase = Path(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    batch_size = 2 if phase == "save" else 1
    loader = gpupipe.loader(
        folder / "d13", PLAIN, batch_size=batch_size, seed=7, backend="torchvision", device="cpu", num_threads=0
    )
    if phase == "save":
        loader.set_epoch(1)
        it = iter(loader)
        before = [sample_ids(next(it)[0]) for _ in range(2)]
        if rank == 0:
            torch.save(loader.state_dict(), folder / "state.pt")
        names = loader.source.names
        order = [int(Path(names[i]).stem[1:]) for i in loader.source.epoch_order(seed=7, epoch=1, shuffle=True)]
        result = {"before": sum(before, []), "order": order}
    else:
        loader.load_state_dict(torch.load(folder / "state.pt", weights_only=True))
        length = len(loader)
        after = sum((sample_ids(images) for images, _ in loader), [])
        next_epoch = loader.state_dict()["epoch"]
        epoch2 = sum((sample_ids(images) for images, _ in loader), [])
        result = {"after": after, "len": length, "next_epoch": next_epoch, "epoch2": epoch2}
    (folder / f"{phase}-{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
