"""Accelerate on 2 CPU processes (gloo), started by torchrun as ``accelerate launch`` does.

``before`` is built before ``Accelerator()`` (no process group yet), ``after``
once it exists; both go through ``accelerator.prepare``. Each rank writes
what it saw: the sample ids per epoch, the gradient-sync flags of an
accumulating epoch, what ``gather_for_metrics`` returned, a skip, a
save_state / load_state round trip, exact evaluation with a file that
fails to decode, and the answers to a wrong explicit share; then, into
``interop-rank<rank>.json``, what ``accelerate_interop_worker.py`` records
(one launch serves tests/test_frameworks.py and tests/test_interop_frameworks.py).
"""

import argparse
import json
import sys
from pathlib import Path

import torch
from accelerate import Accelerator

sys.path.insert(0, str(Path(__file__).parent))
from accelerate_interop_worker import interop  # noqa: E402
from helpers import sample_ids  # noqa: E402

import gpupipe  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--folder", required=True)
parser.add_argument("--odd-folder", required=True)
parser.add_argument("--broken-folder", required=True)
parser.add_argument("--backend", required=True)
parser.add_argument("--out", required=True)
args = parser.parse_args()
PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]


def make(folder=args.folder, **kwargs):
    return gpupipe.loader(folder, PIPELINE, batch_size=4, backend=args.backend, device="cpu", seed=3, **kwargs)


def ids(loader):
    return [sample_ids(images) for images, _ in loader]


before = make()
accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
after = make()
model = torch.nn.Linear(1, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
model, optimizer, before, after = accelerator.prepare(model, optimizer, before, after)
rank = accelerator.process_index
result = {"rank": rank, "epochs": {"before": [ids(before), ids(before)], "after": [ids(after), ids(after)]}}

syncs = []  # epoch 2 of `after`, accumulating 2 batches per optimizer step
for _ in after:
    with accelerator.accumulate(model):
        syncs.append(accelerator.sync_gradients)
result["syncs"] = syncs

evaluation = accelerator.prepare(make(args.odd_folder, shuffle=False))  # 23 samples: one padded on 2 ranks
gathered = []
for images, _ in evaluation:
    gathered.extend(accelerator.gather_for_metrics(torch.tensor(sample_ids(images))).tolist())
result["gathered"] = gathered

exact = accelerator.prepare(make(args.broken_folder, shuffle=False, even_batches=False, on_error="skip"))
result["exact"] = []  # 23 samples, one fails to decode: exact evaluation leaves it out, repeats nothing
for images, _ in exact:
    result["exact"].extend(accelerator.gather_for_metrics(sample_ids(images), use_gather_object=True))
result["dropped"] = exact.stats().dropped

try:
    accelerator.skip_first_batches(after, 1)
    result["accelerate_skip"] = "no error"
except AttributeError as err:
    result["accelerate_skip"] = str(err)
result["full"] = ids(after)  # epoch 3
after.set_epoch(3)
try:
    result["skipped"] = ids(after.skip(1))
except AttributeError as err:  # recorded: the test shows it
    result["skipped"] = str(err)

accelerator.register_for_checkpointing(after)  # epoch 4: stop after one batch, save, read on, restore
it = iter(after)
next(it)
accelerator.save_state(str(Path(args.out, "state")))
result["rest"] = [sample_ids(images) for images, _ in it]
accelerator.wait_for_everyone()
accelerator.load_state(str(Path(args.out, "state")))
result["resumed"] = ids(after)

try:
    ids(make(rank=0, world_size=3))
    result["wrong_share"] = "no error"
except ValueError as err:
    result["wrong_share"] = str(err)
result["whole"] = ids(make(rank=0, world_size=1))  # an explicit world of one: this process reads everything
Path(args.out, f"rank{rank}.json").write_text(json.dumps(result))
Path(args.out, f"interop-rank{rank}.json").write_text(json.dumps(interop(accelerator, args.folder)))
