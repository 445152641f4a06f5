"""Demo data: parallel generation gives the same files, progress is reported, and the segmentation and
detection sets load with gpupipe (counts, mask values, boxes)."""

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from script_batch import run_scripts

import gpupipe
from gpupipe.demo import photos as demo
from gpupipe.demo import tasks as demo_tasks

MAKE_DEMO = Path(__file__).parents[1] / "datasets" / "make_demo.py"


def test_the_demo_set_is_the_same_on_one_process_or_many_and_reports_progress(tmp_path, monkeypatch):
    monkeypatch.setattr(demo, "CHUNK", 2)
    spec = demo.DemoSpec(classes=2, per_class=3)
    seen = []
    demo.generate(tmp_path / "one", spec, workers=1)
    demo.generate(tmp_path / "many", spec, workers=2, progress=lambda done, total: seen.append((done, total)))
    files = sorted(p.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("*.jpg"))
    assert len(files) == 6
    assert all((tmp_path / "one" / f).read_bytes() == (tmp_path / "many" / f).read_bytes() for f in files)
    assert seen[0] == (0, 6) and seen[-1] == (6, 6) and len(seen) == 5, "one report per chunk of 2 (3 a class)"
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_the_segmentation_set_loads_as_a_segmentation_folder(tmp_path):
    root = demo_tasks.write_segmentation(tmp_path, demo_tasks.TaskSpec(images=6, classes=5, min_side=64,
                                                                       max_side=96), workers=2)
    source = gpupipe.SegmentationFolder(root / "images", root / "masks")
    assert len(source) == 6 and source.problems == []
    masks = [np.asarray(Image.open(p)) for p in sorted((root / "masks").iterdir())]
    images = [Image.open(p) for p in sorted((root / "images").iterdir())]
    assert all(m.dtype == np.uint8 and m.ndim == 2 for m in masks)
    assert all(m.shape == (im.height, im.width) for m, im in zip(masks, images))
    values = set(np.unique(np.concatenate([m.ravel() for m in masks])).tolist())
    assert 0 in values and values <= set(range(5)) and len(values) >= 3, values
    loader = gpupipe.loader(source, [gpupipe.Decode(), gpupipe.CenterCrop(size=48)], batch_size=3,
                            backend="torchvision", device="cpu", num_threads=1)
    batches = list(loader)
    assert len(batches) == 2
    assert all(m.shape == (3, 48, 48) and int(m.max()) < 5 for _, m in batches)


def test_the_detection_set_loads_as_coco_detection(tmp_path):
    root = demo_tasks.write_detection(tmp_path, demo_tasks.TaskSpec(images=6, classes=3, min_side=64,
                                                                    max_side=96), workers=2)
    coco = json.loads((root / "annotations.json").read_text())
    assert [c["id"] for c in coco["categories"]] == [1, 2, 3] and len(coco["images"]) == 6
    assert [a["id"] for a in coco["annotations"]] == list(range(1, len(coco["annotations"]) + 1))
    assert len(coco["annotations"]) >= 6
    sizes = {im["id"]: (im["width"], im["height"]) for im in coco["images"]}
    for ann in coco["annotations"]:
        x, y, w, h = ann["bbox"]
        width, height = sizes[ann["image_id"]]
        assert 0 <= x and 0 <= y and w > 0 and h > 0 and x + w <= width and y + h <= height
        assert 1 <= ann["category_id"] <= 3 and ann["area"] >= demo_tasks.MIN_OBJECT_PIXELS
    source = gpupipe.CocoDetection(root / "images", root / "annotations.json")
    assert len(source) == 6 and source.classes == ["shape_0", "shape_1", "shape_2"] and source.problems == []
    loader = gpupipe.loader(source, [gpupipe.Decode(), gpupipe.Resize(size=64), gpupipe.CenterCrop(size=64)],
                            batch_size=6, backend="torchvision", device="cpu", num_threads=1, shuffle=False)
    images, targets = next(iter(loader))
    assert images.shape == (6, 3, 64, 64)
    assert int((targets["labels"] >= 0).sum()) >= 6 and int(targets["labels"].max()) <= 2


TASK_CASES = [("segmentation", ["images", "masks"]), ("detection", ["annotations.json", "images"])]
BAD_CASES = [(["--images", "0"], "error: --images must be >= 1, got 0"),
             (["--task", "depth"], "error: argument --task: invalid choice: 'depth'")]


@pytest.fixture(scope="module")
def make_demo_runs(tmp_path_factory) -> tuple:
    """make_demo.py's command lines of the tests below, run in one process (``script_batch``: torch imported
    once); each writes under its own folder. Returns that folder and each run's result, by task or argv."""
    tmp = tmp_path_factory.mktemp("make-demo")
    argvs = {task: [tmp / task / "out", "--task", task, "--images", "3", "--workers", "1"] for task, _ in TASK_CASES}
    argvs.update({" ".join(argv): [tmp / " ".join(argv) / "out", *argv] for argv, _ in BAD_CASES})
    for argv in argvs.values():
        argv[0].parent.mkdir()
    cases = [{"script": str(MAKE_DEMO), "args": [str(a) for a in argv], "cwd": str(tmp)} for argv in argvs.values()]
    return tmp, dict(zip(argvs, run_scripts(cases, tmp)))


@pytest.mark.parametrize("task, expected", TASK_CASES)
def test_make_demo_writes_a_task_set_with_progress_and_the_next_command(make_demo_runs, task, expected):
    tmp, runs = make_demo_runs
    proc, out = runs[task], tmp / task / "out"
    assert proc["returncode"] == 0, proc["stderr"]
    assert sorted(p.name for p in out.iterdir()) == expected
    assert f"{task} demo: 3/3 images" in proc["stderr"]
    # run outside the clone: the script by its absolute path (before: examples/train_<task>.py, no file from there)
    script = MAKE_DEMO.parents[1] / "examples" / f"train_{task}.py"
    assert f"next: python {script} {out / 'images'}" in proc["stdout"] and script.is_file()


@pytest.mark.parametrize("argv, message", BAD_CASES)
def test_make_demo_bad_arguments_are_one_line(make_demo_runs, argv, message):
    tmp, runs = make_demo_runs
    proc = runs[" ".join(argv)]
    assert proc["returncode"] == 2 and proc["stderr"].startswith(message) and proc["stderr"].count("\n") == 1
    assert not (tmp / " ".join(argv) / "out").exists()
