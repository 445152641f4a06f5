"""Train with DistributedDataParallel under torchrun, fed by gpupipe; resumable mid-epoch, exact validation.

One machine, 2 processes (CPU: gloo; GPUs: NCCL, one process per GPU):

    torchrun --standalone --nproc_per_node=2 examples/train_ddp.py DATA --checkpoint ckpt/

Several machines (run on each; the same --rdzv-endpoint, a free port on node 0):

    torchrun --nnodes=2 --nproc_per_node=8 --rdzv-backend=c10d \\
        --rdzv-endpoint=node0.example:29500 --rdzv-id=job42 examples/train_ddp.py DATA --checkpoint ckpt/

Each rank reads its own part of DATA (gpupipe takes rank and world size
from torch.distributed) and yields the same number of batches. With
--checkpoint DIR every rank saves model, optimiser and its loader state
every --save-every steps, at the end of every epoch and at --max-steps;
run again, it resumes where it stopped (and says where), and a finished
run does nothing more. After each epoch it validates on --val (default:
DATA) with even_batches=False: every image counted exactly once over all
ranks, the accuracy summed with one all_reduce. The step autocasts to bf16
where the machine runs it well, else float32 (--amp).
"""

from __future__ import annotations

import argparse
import os

import _common
import torch
import torch.distributed as dist
import torchvision
from torch.nn.parallel import DistributedDataParallel

import gpupipe

#: How to start this script, said when it is run without torchrun.
USAGE = "torchrun --standalone --nproc_per_node=2 examples/train_ddp.py DATA [options]"


def parse_args() -> argparse.Namespace:
    parser = _common.parser(__doc__)
    parser.add_argument("data", type=_common.existing_path,
                        help="image folder root/<class>/<image>, list file or packed shards")
    parser.add_argument("--val", type=_common.existing_path, help="validation data (default: DATA)")
    parser.add_argument("--model", default="resnet18", help="torchvision model name")
    parser.add_argument("--epochs", type=_common.positive_int, default=1, help="epochs to train")
    parser.add_argument("--batch-size", type=_common.positive_int, default=32, help="per rank")
    parser.add_argument("--size", type=_common.positive_int, default=128, help="training crop size in pixels")
    _common.backend_option(parser)
    parser.add_argument("--amp", choices=_common.AMP_CHOICES, default="auto",
                        help="autocast precision: auto (bf16 where the machine runs it well, else float32), "
                             "bf16, fp16 or off (float32)")
    parser.add_argument("--checkpoint", type=_common.folder, help="folder for checkpoints (resumes from it)")
    parser.add_argument("--save-every", type=int, default=50, help="steps between checkpoints (0: epoch ends only)")
    _common.on_error_option(parser)
    parser.add_argument("--max-steps", type=int, default=0, help="stop after this many steps in all (0: no limit)")
    args = parser.parse_args()
    if args.model not in torchvision.models.list_models(torchvision.models):
        parser.error(f"argument --model: {args.model!r} is not a torchvision classification model")
    if _common.torchrun_rank() is None:
        _common.fail(f"examples/train_ddp.py runs under torchrun, one process per GPU (or CPU share): {USAGE}")
    return args


def evaluate(model, loader, device, amp) -> float:
    """Top-1 accuracy over every validation image exactly once (even_batches=False), all ranks together."""
    model.eval()
    totals = torch.zeros(2, dtype=torch.float64, device=device)
    with torch.no_grad(), amp.autocast(device.type):
        for images, labels in loader:
            totals[0] += (model(images).argmax(dim=1) == labels).sum()
            totals[1] += len(labels)
    dist.all_reduce(totals)  # per-rank sums: no image counted twice, none left out
    model.train()
    return (totals[0] / totals[1]).item()


def main() -> None:
    args = parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")

    loader = gpupipe.loader(args.data, gpupipe.presets.train(args.size), batch_size=args.batch_size,
                            backend=args.backend, device=device, drop_last=True, channels_last=True,
                            on_error=args.on_error)
    val_loader = gpupipe.loader(args.val or args.data, gpupipe.presets.val(args.size, resize=args.size * 8 // 7),
                                batch_size=args.batch_size, backend=loader.backend, device=device, shuffle=False,
                                even_batches=False, channels_last=True, on_error=args.on_error)
    amp = _common.amp(device, args.amp)
    scaler = torch.amp.GradScaler(device.type, enabled=amp.needs_scaler)
    if rank == 0:
        print(f"gpupipe backend: {loader.backend} ({loader.backend_reason})")
        print(f"autocast: {amp.name} ({amp.reason})")
    model = torchvision.models.get_model(args.model, num_classes=len(loader.classes))
    model = DistributedDataParallel(model.to(device, memory_format=torch.channels_last),
                                    device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    step = 0
    ckpt = args.checkpoint / f"rank{rank}.pt" if args.checkpoint else None

    def save() -> None:
        if ckpt is not None:
            ckpt.parent.mkdir(parents=True, exist_ok=True)
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                        "loader": loader.state_dict(), "scaler": scaler.state_dict(), "step": step}, ckpt)

    if ckpt is not None and ckpt.exists():
        state = torch.load(ckpt, map_location=device, weights_only=True)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        loader.load_state_dict(state["loader"])  # continues mid-epoch, exactly
        if state.get("scaler"):  # saved by an fp16 run (bf16 and float32 need no scaler)
            scaler.load_state_dict(state["scaler"])
        step = state["step"]
        print(f"rank {rank}: resumed at epoch {state['loader']['epoch']}, batch {state['loader']['batches_done']}, "
              f"step {step}")
    start_epoch = loader.epoch
    done = lambda: args.max_steps and step >= args.max_steps  # noqa: E731
    if start_epoch >= args.epochs or done():
        print(f"rank {rank}: nothing to do: the run finished at epoch {start_epoch}, step {step}")
    planned = (args.epochs - start_epoch) * len(loader)
    shown = _common.progress(loader, min(planned, args.max_steps - step) if args.max_steps else planned, rank == 0)
    for epoch in range(start_epoch, args.epochs):
        if done():
            break
        loader.set_epoch(epoch)
        for images, labels in shown:
            with amp.autocast(device.type):
                loss = torch.nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            step += 1
            if (args.save_every and step % args.save_every == 0) or done():
                save()
            if rank == 0 and step % 10 == 0:
                print(f"epoch {epoch} step {step}: loss {loss.item():.3f}")
            if done():
                break
        else:  # the epoch ended
            save()
            stats = loader.stats(reset=True)  # this epoch's training batches
            accuracy = evaluate(model, val_loader, device, amp)
            if rank == 0:
                print(f"epoch {epoch}: validation accuracy {accuracy:.3f} over {len(val_loader.source)} images; "
                      f"input pipeline, rank 0: {stats}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    _common.run(main)
