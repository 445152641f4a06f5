"""Train with DistributedDataParallel under torchrun, fed by gpupipe; resumable mid-epoch.

One machine, 2 processes (CPU: gloo; GPUs: NCCL, one process per GPU):

    torchrun --standalone --nproc_per_node=2 examples/train_ddp.py DATA --epochs 2

Several machines (run on each; the same --rdzv-endpoint, a free port on node 0):

    torchrun --nnodes=2 --nproc_per_node=8 --rdzv-backend=c10d \\
        --rdzv-endpoint=node0.example:29500 --rdzv-id=job42 examples/train_ddp.py DATA

Each rank reads its own part of DATA (gpupipe takes rank and world size
from torch.distributed) and yields the same number of batches. With
--checkpoint DIR the script saves model, optimiser and every rank's loader
state every --save-every steps, and resumes from them when restarted.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torchvision
from torch.nn.parallel import DistributedDataParallel

import gpupipe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help="image folder root/<class>/<image>, list file or packed shards")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--checkpoint", type=Path, help="folder for checkpoints (resumes from it)")
    parser.add_argument("--save-every", type=int, default=50, help="steps between checkpoints")
    parser.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: no limit)")
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")

    loader = gpupipe.loader(args.data, gpupipe.presets.train(args.size), batch_size=args.batch_size,
                            backend=args.backend, device=device, drop_last=True, channels_last=True)
    model = torchvision.models.get_model(args.model, num_classes=len(loader.classes))
    model = DistributedDataParallel(model.to(device, memory_format=torch.channels_last),
                                    device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    start_epoch, step = 0, 0
    ckpt = args.checkpoint / f"rank{rank}.pt" if args.checkpoint else None
    if ckpt is not None and ckpt.exists():
        state = torch.load(ckpt, map_location=device, weights_only=True)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        loader.load_state_dict(state["loader"])  # continues mid-epoch, exactly
        start_epoch, step = state["loader"]["epoch"], state["step"]
        print(f"rank {rank}: resumed at epoch {start_epoch}, step {step}")

    for epoch in range(start_epoch, args.epochs):
        loader.set_epoch(epoch)
        for images, labels in loader:
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if ckpt is not None and step % args.save_every == 0:
                ckpt.parent.mkdir(parents=True, exist_ok=True)
                torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                            "loader": loader.state_dict(), "step": step}, ckpt)
            if rank == 0 and step % 10 == 0:
                print(f"epoch {epoch} step {step}: loss {loss.item():.3f}")
            if args.max_steps and step >= args.max_steps:
                break
        if args.max_steps and step >= args.max_steps:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
