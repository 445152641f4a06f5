"""Red team: masks, boxes and multi-label targets through the real Lightning and Accelerate (2 CPU ranks, gloo).

``tests/test_frameworks.py`` covers classification; here every other target kind goes through a Lightning
fit (``strategy="ddp"``, a dict of four train loaders, two validation loaders, a mid-epoch checkpoint resumed
in new processes, a rank without validation batches) and Accelerate (``prepare``, ``gather_for_metrics``,
accumulation, ``skip_first_batches``, ``prepare_data_loader``, ``save_state``); pickling and Python 3.12's
protocol check without a launch.

Two torchrun launches of ``redteam_frameworks_worker.py`` serve every launch test (Lightning's DDP takes
torchrun's ranks; a launch costs ~10 s of imports on the 2-core VM).

The data: 13 samples (odd: one padded repeat on 2 ranks; 2 batches of 4 per rank) whose colour codes their
id (``helpers.sample_ids``), each with a target that is a function of its id (``expected``), so a target
that comes with another sample's image, or a changed dtype or value, shows.
"""

import copy
import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import CPU_BACKEND_NAMES, flat_folder
from imagecases import broken_inside_jpeg
from PIL import Image

import gpupipe

pytest.importorskip("lightning")
pytest.importorskip("accelerate")
pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
SAMPLES, BAD = 13, 5  # BAD: the validation sample that passes the scan and fails to decode
KINDS = ("seg", "det", "ml", "lists")
BACKEND = "dali-cpu" if "dali-cpu" in CPU_BACKEND_NAMES else "torchvision"
TAGS = ("x", "y", "z")


#: The batches' forms (``redteam_frameworks_worker.form``): batches of 4, then 3; a detection batch's N is 2.
FORMS = {
    "seg": {f"tuple[2]<int64({b}, 8, 8)@cpu | uint8({b}, 3, 8, 8)@cpu>" for b in (3, 4)},
    "ml": {f"tuple[2]<float32({b}, 3)@cpu | uint8({b}, 3, 8, 8)@cpu>" for b in (3, 4)},
    "det": {
        f"tuple[2]<uint8({b}, 3, 8, 8)@cpu | {{boxes: float32({b}, 2, 4)@cpu, labels: int64({b}, 2)@cpu, "
        f"image_sizes: int64({b}, 2)@cpu}}>"
        for b in (3, 4)
    },
}


def coco(names) -> dict:
    """Image ``i`` (24 x 20) holds ``i % 3`` boxes: box ``k`` is ``[3k, 2k, 6, 6]`` (xywh) of category ``k + 1``."""
    images = [{"id": i + 1, "file_name": name, "width": 24, "height": 20} for i, name in enumerate(names)]
    boxes = [(i, k) for i in range(len(names)) for k in range(i % 3)]
    annotations = [
        {"id": n + 1, "image_id": i + 1, "category_id": k + 1, "bbox": [3 * k, 2 * k, 6, 6], "area": 36, "iscrowd": 0}
        for n, (i, k) in enumerate(boxes)
    ]
    return {
        "images": images,
        "annotations": annotations,
        "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}],
    }


def tags(i: int) -> list:
    return [t for j, t in enumerate(TAGS) if (i >> j) & 1] or ["x"]


def build(root: Path) -> Path:
    """``flat/`` images, ``seg/`` image and mask pairs, ``ann.json``, ``tags.txt``, ``val/`` + ``val.json`` and
    ``one/`` (a single sample)."""
    flat_folder(root / "one", 1)  # fewer samples than ranks
    images = sorted((flat_folder(root / "flat", SAMPLES, classes=1) / "class_0").glob("*.png"))
    for i, path in enumerate(images):
        for folder in ("seg/images", "seg/masks", "val"):
            (root / folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, root / "seg" / "images" / path.name)
        mask = np.full((20, 24), i % 3, np.uint8)
        mask[:, 12:] = (i + 1) % 3
        Image.fromarray(mask, "L").save(root / "seg" / "masks" / path.name)
        if i != BAD:
            shutil.copy(path, root / "val" / path.name)
    broken_inside_jpeg(root / "val" / f"s{BAD:04d}.jpg", size=(20, 24))  # the annotation's size: passes the scan
    (root / "ann.json").write_text(json.dumps(coco([p.name for p in images])))
    (root / "val.json").write_text(
        json.dumps(coco([p.name if i != BAD else f"s{BAD:04d}.jpg" for i, p in enumerate(images)]))
    )
    (root / "tags.txt").write_text(
        "".join(f"flat/class_0/{p.name} {','.join(tags(i))}\n" for i, p in enumerate(images))
    )
    return root


def expected(kind: str, i: int):
    """Sample ``i``'s target at 8 x 8 px as the worker's ``describe`` writes it."""
    if kind == "seg":  # nearest-exact from 24 columns: output columns 0-3 read input columns < 12
        return [[i % 3] * 4 + [(i + 1) % 3] * 4] * 8
    if kind == "ml":
        return [1.0 if t in tags(i) else 0.0 for t in TAGS]
    return [[k, k, round(0.8 * k, 3), k + 2, round(0.8 * k + 2.4, 3)] for k in range(i % 3)]  # x / 3, y / 2.5


def check_targets(kind: str, samples: list) -> None:
    for i, target in samples:
        want = expected(kind, i)
        if kind in ("det", "lists"):  # boxes: float32 coordinates, rounded to 3 decimals by the worker
            target, want = np.asarray(target, float).reshape(-1, 5), np.asarray(want, float).reshape(-1, 5)
            assert target.shape == want.shape and np.allclose(target, want, atol=2e-3), f"{kind}: sample {i}: {target}"
        else:
            assert target == want, f"{kind}: sample {i} came with another target: {target}"


@pytest.fixture(scope="module")
def launches(tmp_path_factory):
    """``(run, resume)``: each rank's record of the two launches (by rank)."""
    root = build(tmp_path_factory.mktemp("redteam_frameworks"))
    out = root / "out"
    out.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    for phase in ("run", "resume"):
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(HERE / "redteam_frameworks_worker.py"),
            "--data",
            str(root),
            "--out",
            str(out),
            "--phase",
            phase,
            "--backend",
            BACKEND,
        ]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=out)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return tuple(
        [json.loads((out / f"{phase}-rank{r}.json").read_text()) for r in range(2)] for phase in ("run", "resume")
    )


def ids(samples):
    return [i for i, _ in samples]


# -- Lightning ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_lightning_reads_every_kind_once_per_epoch_on_disjoint_ranks_with_equal_batches(launches, kind):
    runs = [run["lightning"] for run in launches[0]]
    for epoch in ("0", "1"):
        seen = [ids(run["seen"][kind][epoch]) for run in runs]
        assert len(seen[0]) == len(seen[1]) == 7, "7 samples per rank: the 13th's share padded with one repeat"
        assert sorted(set(seen[0] + seen[1])) == list(range(SAMPLES)), f"epoch {epoch}: every sample read"
        assert len(set(seen[0]) & set(seen[1])) <= 1, "the ranks' shares overlap in the padded repeat only"
    assert [run["lens"][kind] for run in runs] == [2, 2], "len(): 2 batches (4 + 3) on each rank"
    assert ids(runs[0]["seen"][kind]["0"]) != ids(runs[0]["seen"][kind]["1"]), "Lightning's set_epoch reshuffles"


@pytest.mark.parametrize("kind", KINDS)
def test_lightning_hands_each_kinds_targets_with_its_images_dtypes_and_shapes(launches, kind):
    for run in launches[0] + launches[1]:
        lightning = run["lightning"]
        if kind in FORMS:
            assert set(lightning["forms"][kind]) <= FORMS[kind]
        else:  # DetectionLists: lists of (3, 8, 8) images and of {"boxes": (n, 4), "labels": (n,)}, n = 0, 1, 2
            for form in lightning["forms"][kind]:
                assert form.startswith(
                    (
                        "tuple[2]<list[4]<uint8(3, 8, 8)@cpu> | list[4]<{boxes: float32(",
                        "tuple[2]<list[3]<uint8(3, 8, 8)@cpu> | list[3]<{boxes: float32(",
                    )
                )
        for epoch in lightning["seen"][kind].values():
            check_targets(kind, epoch)


def test_lightning_exact_evaluation_of_boxes_reads_each_sample_once_with_uneven_batches(launches):
    for phase in launches:
        runs = [run["lightning"] for run in phase]
        assert [run["val_lens"][0] for run in runs] == [3, 2], "7 and 6 samples in batches of 3: ranks differ"
        for epoch in runs[0]["val"]["0"]:
            seen = [run["val"]["0"][epoch] for run in runs]
            assert sorted(ids(seen[0] + seen[1])) == [i for i in range(SAMPLES) if i != BAD], "each once, BAD out"
            check_targets("det", seen[0] + seen[1])
            masks = [run["val"]["1"][epoch] for run in runs]
            assert sorted(set(ids(masks[0] + masks[1]))) == list(range(SAMPLES))
            check_targets("seg", masks[0] + masks[1])
        assert [run["val_seen"] for run in runs] == [12.0, 12.0], "Lightning's epoch-end sum over both ranks"
        epochs = len(runs[0]["val"]["0"])  # the loader is built once: 2 validations in the run, 1 in the resume
        assert sum(run["dropped"] for run in runs) == epochs, "the broken file, counted on the rank that read it"


@pytest.mark.parametrize("kind", KINDS)
def test_lightning_mid_epoch_checkpoint_resumes_every_kind_exactly_in_new_processes(launches, kind):
    for run, resumed in zip(*launches):
        run, resumed = run["lightning"], resumed["lightning"]
        assert list(resumed["seen"][kind]) == ["1"], "epoch 0 was finished before the checkpoint"
        assert resumed["seen"][kind]["1"] == run["seen"][kind]["1"][4:], "the rest of epoch 1, targets alike"


def test_lightning_refuses_an_exact_evaluation_loader_that_leaves_a_rank_without_batches_on_every_rank(launches):
    """One sample, 2 ranks, ``even_batches=False``: rank 1 has no batch. Lightning then raised on rank 1 only
    (``within local rank has zero length``), or, allowed zero lengths, skipped its loop there, so that rank 0's
    epoch-end reduction waited for a rank already training: a hang. Every rank now refuses it alike."""
    for run in launches[1]:
        message = run["empty"]
        assert message.startswith("EmptyRank") and "even_batches=False" in message and "rank 1 of 2" in message, message
        assert "1 sample" in message and "\n" not in message


# -- Accelerate -----------------------------------------------------------------------------------------------


def test_accelerate_prepare_hands_every_kind_back_unchanged_and_unsharded_again(launches):
    for run in launches[0]:
        accelerate = run["accelerate"]
        assert accelerate["same"] == [True] * 4, "prepare() returns the loader itself (no DataLoaderShard)"
        assert accelerate["lens"] == {kind: 2 for kind in KINDS}, "len(): gpupipe's own share, not split again"
        for kind, forms in FORMS.items():
            assert set(accelerate["forms"][kind]) <= forms, kind


@pytest.mark.parametrize("kind", KINDS)
def test_accelerate_epochs_without_set_epoch_cover_the_data_and_reshuffle(launches, kind):
    runs = [run["accelerate"]["epochs"][kind] for run in launches[0]]
    for epoch in (0, 1):
        both = ids(runs[0][epoch]) + ids(runs[1][epoch])
        assert len(both) == SAMPLES + 1 and sorted(set(both)) == list(range(SAMPLES))
        check_targets(kind, runs[0][epoch] + runs[1][epoch])
    assert ids(runs[0][0]) != ids(runs[0][1]), "each pass reads the next epoch, as gpupipe's own epochs do"


@pytest.mark.parametrize("kind", ["seg", "ml", "det"])
def test_accelerate_gather_for_metrics_keeps_each_sample_once_with_its_target(launches, kind):
    """Boxes: each rank's batch is padded to its own N, so the dict is first padded across the ranks
    (``accelerator.pad_across_processes(targets, dim=1, pad_index=-1)``, as docs/ddp.md says)."""
    for run in launches[0]:
        gathered = run["accelerate"]["gathered"][kind]
        assert sorted(ids(gathered)) == list(range(SAMPLES)), "13 samples: the padded repeat dropped"
        check_targets(kind, gathered)


def test_accelerate_accumulation_steps_at_the_epochs_last_batch_of_masks(launches):
    for run in launches[0]:  # 2 batches, 3 per optimizer step: the last batch of the epoch still steps
        assert run["accelerate"]["syncs"] == [False, True]


def test_accelerate_exact_evaluation_of_detection_lists(launches):
    for run in launches[0]:
        exact = run["accelerate"]["exact"]
        assert sorted(ids(exact)) == [i for i in range(SAMPLES) if i != BAD]
        check_targets("lists", exact)


def test_accelerate_skip_first_batches_is_refused_through_detection_lists(launches):
    """``DetectionLists`` hands ``dataset`` on to its loader: Accelerate's rebuild must be refused there too
    (it failed deep in torch's DataLoader, or built one over the raw dataset)."""
    for run in launches[0]:
        message = run["accelerate"]["accelerate_skip"]
        assert message.startswith("RebuildRefused: ") and "loader.skip(n)" in message, message


def test_accelerate_prepare_data_loader_is_refused_pointing_to_prepare(launches):
    """``accelerator.prepare_data_loader(loader)`` rebuilds a torch DataLoader over ``loader.dataset``, without
    gpupipe's pipeline and sharded a second time; it failed deep in torch (``prefetch_factor``)."""
    for run in launches[0]:
        message = run["accelerate"]["prepare_data_loader"]
        assert message.startswith("RebuildRefused: ") and "accelerator.prepare(" in message, message


def test_accelerate_save_state_and_load_state_resume_detection_lists(launches):
    for run in launches[0]:
        accelerate = run["accelerate"]
        assert len(accelerate["rest"]) == 1 and accelerate["resumed"] == accelerate["rest"]
        check_targets("lists", sum(accelerate["rest"], []))


# -- without a launch -----------------------------------------------------------------------------------------


def test_detection_lists_is_stateful_where_python_looks_attributes_up_statically(tmp_path):
    """Lightning keeps a loader's state in its checkpoints when ``isinstance(loader, _Stateful)``, a runtime
    protocol: from Python 3.12 that check looks ``state_dict`` / ``load_state_dict`` up with
    ``inspect.getattr_static``, which never calls ``__getattr__``; a ``DetectionLists`` that only forwarded
    them was then not resumable (its checkpoint resumed the epoch from its first batch)."""
    root = build(tmp_path)
    loader = gpupipe.loader(
        gpupipe.CocoDetection(root / "flat" / "class_0", root / "ann.json"),
        [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")],
        batch_size=4,
        backend="torchvision",
        device="cpu",
        num_threads=0,
    )
    lists = gpupipe.DetectionLists(loader)
    for name in ("state_dict", "load_state_dict", "set_epoch"):
        assert callable(inspect.getattr_static(lists, name, None)), name
    it = iter(lists)
    next(it)
    state = lists.state_dict()
    assert state == loader.state_dict()
    rest = [[t["labels"].tolist() for t in targets] for _, targets in it]
    lists.load_state_dict(state)
    assert [[t["labels"].tolist() for t in targets] for _, targets in lists] == rest


@pytest.mark.parametrize("wrap", [False, True])
def test_a_loader_sent_to_another_process_is_refused_saying_where_to_build_it(tmp_path, wrap):
    """Lightning's ``strategy="ddp_spawn"`` (and ``torch.multiprocessing.spawn``) pickle what ``fit`` is
    given: a loader failed with ``cannot pickle 'weakref.ReferenceType' object``, naming neither gpupipe nor
    a remedy."""
    import pickle

    root = build(tmp_path)
    loader = gpupipe.loader(
        gpupipe.CocoDetection(root / "flat" / "class_0", root / "ann.json"),
        [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")],
        batch_size=2,
        backend="torchvision",
        device="cpu",
        num_threads=0,
    )
    with pytest.raises(TypeError, match=r"gpupipe Loader cannot be pickled.*ddp_spawn.*train_dataloader\(\)"):
        pickle.dumps(gpupipe.DetectionLists(loader) if wrap else loader)
    copied = copy.deepcopy(loader)  # in this process: still a copy, whose sampler sets the copy's epoch
    copied.sampler.set_epoch(3)
    assert copied.sampler.loader is copied and (copied.epoch, loader.epoch) == (3, 0)
