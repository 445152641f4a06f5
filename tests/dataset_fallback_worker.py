"""One rank of ``torchrun --nproc_per_node=2`` (gloo): a dataset read as it is (``fallback="torchvision"``),
against torch's ``DataLoader`` over the same ``DistributedSampler``. Writes ``rank<r>.json`` into ``argv[1]``."""

import json
import sys
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler

import gpupipe


class Numbered(Dataset):
    """Sample ``i`` is ``(tensor([i]), i % 3)``: a batch names its samples."""

    def __len__(self) -> int:
        return 21

    def __getitem__(self, i: int):
        return torch.tensor([float(i)]), i % 3


def ids(batches) -> list:
    return [int(v) for values, _ in batches for v in values[:, 0]]


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dataset = Numbered()
    record = {}
    plain = DistributedSampler(dataset, shuffle=False)
    record["torch"] = ids(DataLoader(dataset, batch_size=4, sampler=plain))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ours = gpupipe.DataLoader(dataset, batch_size=4, sampler=DistributedSampler(dataset, shuffle=False),
                                  fallback="torchvision")
        shuffled = gpupipe.DataLoader(dataset, batch_size=4, sampler=DistributedSampler(dataset, seed=5),
                                      fallback="torchvision")
        unsampled = gpupipe.DataLoader(dataset, batch_size=4, fallback="torchvision")
    record["ours"] = ids(ours)
    record["unsampled"] = [ids(unsampled), ids(DataLoader(dataset, batch_size=4))]
    record["len"] = [len(ours), len(DataLoader(dataset, batch_size=4, sampler=plain))]
    record["epochs"] = []
    for epoch in (0, 1):
        shuffled.sampler.set_epoch(epoch)
        record["epochs"].append(ids(shuffled))
    Path(sys.argv[1], f"rank{rank}.json").write_text(json.dumps(record))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
