"""A newcomer's first hour, fourth pass: a user's own photo folder (nested class folders, README.txt,
.DS_Store, Thumbs.db, upper-case .JPG, spaces and non-ASCII names, one corrupt file), a list file written
on Windows, the bench's data line and its --image-size, and the one-line errors of a training script."""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import write_image

import gpupipe
from gpupipe.bench.__main__ import main as bench_main
from gpupipe.demo import photos as demo

#: A user's folder: per file, its size (w, h); None: no image.
USER_FILES = {
    "cats/IMG_0001.JPG": (40, 30),
    "cats/IMG_0002.JPG": (40, 30),
    "cats/2023 trip/chat été 1.jpg": (50, 36),
    "cats/2023 trip/chat été 2.jpeg": (50, 36),
    "dogs/dog 1.png": (32, 48),
    "dogs/sub/deeper/Hund_ü 2.webp": (64, 40),
    "dogs/sub/deeper/Hund_ü 3.jpg": (64, 40),
}


@pytest.fixture
def photos(tmp_path) -> Path:
    """The user's folder, with the files a real one holds beside the photos and one corrupt JPEG."""
    root = tmp_path / "photos"
    rng = np.random.default_rng(0)
    for name, (w, h) in USER_FILES.items():
        write_image(root / name, rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
    (root / "README.txt").write_text("my photos\n")
    (root / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (root / "cats" / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (root / "cats" / "Thumbs.db").write_bytes(b"\xd0\xcf\x11\xe0 not an image")
    (root / "dogs" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a JPEG")
    return root


# -- the demo's folder_stats counts what the loaders read ----------------------------------------------------------


def test_folder_stats_counts_what_the_loaders_read(photos):
    loader = gpupipe.loader(str(photos), "val", batch_size=1, on_error="skip", backend="torchvision", device="cpu")
    stats = demo.folder_stats(photos)
    assert stats["images"] == len(loader) == len(USER_FILES) == 7  # nested folders counted, the corrupt file not
    assert stats["classes"] == len(loader.classes) == 2
    sides = [s for size in USER_FILES.values() for s in size]
    assert (stats["min_side"], stats["max_side"]) == (min(sides), max(sides))
    assert stats["mean_width"] == round(np.mean([w for w, _ in USER_FILES.values()]), 1)
    kib = [(photos / name).stat().st_size / 1024 for name in USER_FILES]
    assert stats["total_mib"] == round(sum(kib) / 1024, 1) and stats["mean_kib"] == round(float(np.mean(kib)), 1)


def test_folder_stats_of_a_pack_is_what_its_manifest_holds(photos, tmp_path):
    from gpupipe.pack.__main__ import main as pack_main

    assert pack_main([str(photos), str(tmp_path / "packed"), "-q"]) == 0
    stats = demo.folder_stats(tmp_path / "packed")
    assert stats["images"] == 7 and stats["classes"] == 2 and stats["min_side"] == 30


def test_folder_stats_of_a_folder_without_images_names_it(tmp_path):
    (tmp_path / "empty" / "cats").mkdir(parents=True)
    with pytest.raises(ValueError, match="no images under .*empty"):
        demo.folder_stats(tmp_path / "empty")


# -- a list file written on Windows ------------------------------------------------------------------------------


def _windows_list(photos: Path, name: str = "train.txt") -> Path:
    lines = [f"{p.replace('/', chr(92))} {0 if p.startswith('cats') else 1}" for p in USER_FILES]
    list_file = photos / name
    list_file.write_bytes(("\r\n".join(lines) + "\r\n").encode())
    return list_file


def test_a_list_written_on_windows_reads_every_file(photos, caplog):
    list_file = _windows_list(photos)
    with caplog.at_level(logging.INFO, logger="gpupipe.sources"):
        source = gpupipe.FileList(list_file)
    assert source.names == [str(photos / p) for p in USER_FILES]
    assert [int(v) for v in source.labels] == [0, 0, 0, 0, 1, 1, 1]
    assert f"{list_file}: 7 paths written with '\\' (Windows) are read with '/'" in caplog.text
    loader = gpupipe.loader(str(list_file), "val", batch_size=7, backend="torchvision", device="cpu")
    images, labels = next(iter(loader))
    assert images.shape == (7, 3, 224, 224) and sorted(labels.tolist()) == [0, 0, 0, 0, 1, 1, 1]


def test_a_file_whose_name_holds_a_backslash_is_read_as_named(tmp_path):
    write_image(tmp_path / "odd\\name.jpg", np.zeros((8, 8, 3), np.uint8))
    write_image(tmp_path / "odd" / "name.jpg", np.zeros((8, 8, 3), np.uint8))
    (tmp_path / "list.txt").write_text("odd\\name.jpg 0\nodd/name.jpg 1\n")
    source = gpupipe.FileList(tmp_path / "list.txt")
    assert source.names == [str(tmp_path / "odd\\name.jpg"), str(tmp_path / "odd" / "name.jpg")]


@pytest.mark.parametrize("path", ["C:\\data\\cats\\1.jpg", "D:/data/cats/1.jpg", "\\\\server\\share\\1.jpg"])
def test_a_windows_absolute_path_is_refused_naming_the_line_and_the_fix(tmp_path, path):
    (tmp_path / "list.txt").write_text(f"# made on Windows\n{path} 0\n")
    with pytest.raises(ValueError) as err:
        gpupipe.FileList(tmp_path / "list.txt")
    assert str(err.value) == (
        f"FileList: {tmp_path / 'list.txt'}:2: {path!r} is a Windows absolute path, which this system cannot open: "
        "write the paths relative to the list file's folder (or to root=)"
    )


def test_windows_pairs_are_read_as_a_list_file_is(photos):
    pairs = [(p.replace("/", "\\"), 0) for p in USER_FILES]  # a DataFrame made on Windows
    assert gpupipe.FileList(pairs, root=photos).names == [str(photos / p) for p in USER_FILES]


# -- the bench's --image-size ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--image-size", "1"], "--image-size must be at least 32 px"),
        (["--image-size", "16", "--no-train"], "--image-size must be at least 32 px"),
        (["--image-size", "0"], "--image-size must be at least 32 px, got 0"),
        (["--image-size", "-5"], "--image-size must be at least 32 px, got -5"),
        (["--image-size", "100000", "--batch-size", "32"], "--batch-size 32 at --image-size 100000 needs 3576.3 GiB"),
        (
            ["--model", "vit_b_16", "--image-size", "192"],
            "--image-size 192: model vit_b_16 cannot take 192x192 images (Wrong image height! Expected 224 but got "
            "192!)",
        ),
        (["--model", "inception_v3", "--image-size", "64"], "--image-size 64: model inception_v3 cannot take 64x64"),
    ],
)
def test_the_bench_refuses_an_image_size_a_model_cannot_use(capsys, tmp_path, argv, said):
    assert bench_main(argv + ["--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and said in err[0], err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("model", ["r3d_18", "fasterrcnn_resnet50_fpn", "raft_small"])
def test_the_bench_refuses_a_model_that_is_no_image_classifier(capsys, tmp_path, model):
    """A video, detection or optical-flow model of torchvision.models.list_models() ended in a traceback."""
    assert bench_main(["--model", model, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: --model {model} is not an image classifier: the bench trains one on class labels; choose one "
        "of torchvision.models.list_models(module=torchvision.models) (resnet50, shufflenet_v2_x0_5, ...)"
    ], err


def test_the_bench_takes_a_size_its_model_can_use():
    from gpupipe.bench.args import parse_args

    assert parse_args(["--image-size", "32"]).image_size == 32
    assert parse_args(["--model", "vit_b_16", "--image-size", "224"]).image_size == 224
    assert parse_args(["--model", "regnet_y_400mf", "--image-size", "64"]).image_size == 64  # not built on meta
    assert parse_args(["--model", "vit_b_16", "--image-size", "192", "--no-train"]).image_size == 192


# -- a root holding images of its own ----------------------------------------------------------------------------


def test_images_beside_the_class_folders_are_named_not_dropped_silently(photos, caplog):
    """The class folder given as the root (photos/cats): its own photos are in no class folder."""
    with caplog.at_level(logging.WARNING, logger="gpupipe.sources"):
        source = gpupipe.ImageFolder(photos / "cats")
    assert source.classes == ["2023 trip"] and len(source.names) == 2
    assert (
        f"ImageFolder: {str(photos / 'cats')!r} holds 2 images outside its class folders (IMG_0001.JPG, "
        f"IMG_0002.JPG): they are left out (torchvision's ImageFolder leaves them out too); if the classes are "
        f"the folders beside it, pass {str(photos)!r}"
    ) in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gpupipe.sources"):
        gpupipe.ImageFolder(photos)  # README.txt, .DS_Store: no image, nothing to say
    assert "outside its class folders" not in caplog.text


def test_a_folder_of_photos_without_class_folders_says_what_to_do(tmp_path):
    for i in range(5):
        write_image(tmp_path / "flat" / f"IMG_{i}.JPG", np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(ValueError) as err:
        gpupipe.loader(str(tmp_path / "flat"), "train", batch_size=2)
    assert str(err.value) == (
        f"ImageFolder: {str(tmp_path / 'flat')!r} has no class folders (expected root/<class>/<image>); it holds 5 "
        "images of its own (IMG_0.JPG, IMG_1.JPG, IMG_2.JPG ...): move them into one folder per class, or list them "
        "with their labels in a list file (gpupipe.FileList); to predict on them (no labels), read them with "
        f"gpupipe.FileList({str(tmp_path / 'flat')!r})"
    )


# -- a training script's one-line errors -------------------------------------------------------------------------


def test_a_dataloader_worker_error_says_how_to_see_where_it_came_from(photos, tmp_path):
    """The tutorial DataLoader on the corrupt file: PIL's message names no file; the error line says how to
    see the worker's traceback."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch, torchvision, gpupipe.cli\n"
        "from torchvision import transforms\n"
        "def main():\n"
        f"    ds = torchvision.datasets.ImageFolder({str(photos)!r}, transforms.Compose([transforms.Resize((8, 8)), "
        "transforms.ToTensor()]))\n"
        "    for _ in torch.utils.data.DataLoader(ds, batch_size=8, num_workers=1):\n"
        "        pass\n"
        "gpupipe.cli.run(main)\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ") and line.endswith(
        "(in DataLoader worker process 0; GPUPIPE_DEBUG=1 shows its traceback)"
    ), line


# -- a name in the wrong case ------------------------------------------------------------------------------------


def test_a_backend_or_preset_in_the_wrong_case_names_the_one_meant(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"unknown backend 'DALI-CPU' \(did you mean 'dali-cpu'\?\)"):
        gpupipe.loader(str(tmp_path), batch_size=2, backend="DALI-CPU")
    with pytest.raises(ValueError, match=r"unknown backend 'TorchVision' \(did you mean 'torchvision'\?\)"):
        gpupipe.loader(str(tmp_path), batch_size=2, backend="TorchVision")
    with pytest.raises(ValueError, match=r"unknown preset 'VAL' \(did you mean 'val'\?\)"):
        gpupipe.loader(str(tmp_path), "VAL", batch_size=2)
    assert bench_main(["--backends", "Torchvision"]) == 2
    assert "unknown backend 'Torchvision' (did you mean 'torchvision'?)" in capsys.readouterr().err


# -- the examples' --help ----------------------------------------------------------------------------------------


def test_every_example_option_shows_its_default_once():
    """docs/index.md: "--help lists each example's options and defaults" (gpupipe.cli.ArgumentParser)."""
    parser = gpupipe.cli.ArgumentParser(prog="train.py", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("data")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--loader", choices=["dataloader", "gpupipe"], default="gpupipe")
    parser.add_argument("--val", help="validation data (default: DATA)")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--out", help="where to write")
    text = " ".join(parser.format_help().split())
    assert "--epochs EPOCHS (default: 3)" in text and "--loader {dataloader,gpupipe} (default: gpupipe)" in text
    assert "--val VAL validation data (default: DATA) --quiet" in text
    assert "--out OUT where to write" in text and "None" not in text and text.count("default") == 3, text


def test_the_imagefolder_example_help_shows_its_defaults():
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, str(root / "examples" / "train_imagefolder.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    text = " ".join(done.stdout.split())
    assert done.returncode == 0 and "--epochs EPOCHS (default: 3)" in text and "--size SIZE (default: 64)" in text


# -- the cache folder --------------------------------------------------------------------------------------------


def test_a_cache_folder_written_with_a_tilde_is_under_home(monkeypatch, tmp_path):
    """``GPUPIPE_CACHE=~/cache`` in a .env file, a unit file or a Dockerfile reaches Python unexpanded."""
    from gpupipe import env

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUPIPE_CACHE", "~/gp-cache")
    assert env.cache_dir("scan") == tmp_path / "home" / "gp-cache" / "scan"
    monkeypatch.delenv("GPUPIPE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", "~/xdg")
    assert env.cache_dir() == tmp_path / "home" / "xdg" / "gpupipe"
    monkeypatch.setenv("GPUPIPE_CACHE", "rel-cache")  # relative: from the folder the process runs in
    assert env.cache_dir() == tmp_path / "rel-cache"
    assert not (tmp_path / "~").exists()


# -- a list whose paths lead nowhere -----------------------------------------------------------------------------


def _list(folder: Path, lines: list[str]) -> Path:
    (folder / "lists").mkdir(exist_ok=True)
    (folder / "lists" / "train.txt").write_text("".join(f"{line} 0\n" for line in lines))
    return folder / "lists" / "train.txt"


def test_a_list_whose_paths_start_elsewhere_names_the_root_to_pass(photos, tmp_path):
    list_file = _list(tmp_path, [p for p in USER_FILES if p.startswith("cats/")])  # relative to photos/, not lists/
    with pytest.raises(ValueError) as err:  # not "4 of 4 files cannot be used (pass on_error='skip' ...)"
        gpupipe.loader(str(list_file), "val", batch_size=1, on_error="skip", backend="torchvision", device="cpu")
    assert str(err.value) == (
        f"FileList: none of the 4 files {list_file} names exists ('cats/IMG_0001.JPG' is not in "
        f"{str(tmp_path / 'lists')!r}, where relative paths start); they are in {str(photos)!r}: "
        f"pass root={str(photos)!r} (or move the list file there)"
    )
    assert len(gpupipe.FileList(list_file, root=photos).names) == 4


def test_a_list_of_another_machines_absolute_paths_says_which_part_to_drop(photos, tmp_path):
    list_file = _list(photos, [f"/home/alice/photos/{p}" for p in USER_FILES])
    with pytest.raises(ValueError) as err:
        gpupipe.FileList(list_file).scan()
    assert str(err.value) == (
        f"FileList: none of the 7 files {list_file} names exists ('/home/alice/photos/cats/IMG_0001.JPG' is not "
        f"there); 'cats/IMG_0001.JPG' is in {str(photos)!r}: write the paths without '/home/alice/photos/' "
        f"and pass root={str(photos)!r}"
    )


def test_a_list_whose_files_are_nowhere_to_be_found_says_where_it_looked(tmp_path):
    list_file = _list(tmp_path, ["gone/a.jpg", "gone/b.jpg"])
    with pytest.raises(
        ValueError,
        match=r"none of the 2 files .* names exists \('gone/a.jpg' is not in .*lists', "
        r"where relative paths start; pass root= to start them elsewhere\)$",
    ):
        gpupipe.FileList(list_file).scan()
    with pytest.raises(ValueError, match=r"none of the 2 files of the pairs exists \('gone/a.jpg' is not in "):
        gpupipe.FileList([("gone/a.jpg", 0), ("gone/b.jpg", 1)], root=tmp_path).scan()


def test_a_list_with_some_files_missing_is_left_to_the_scan(photos):
    list_file = _list(photos, ["cats/IMG_0001.JPG", "cats/gone.jpg"])
    assert list(gpupipe.FileList(list_file, root=photos).scan().bad) == [1]
    source = gpupipe.FileList(_list(photos, ["cats/gone.jpg"]))  # parsed without the files: refused by its scan
    assert source.names == [str(photos / "lists" / "cats" / "gone.jpg")]


def test_packing_a_list_whose_paths_start_elsewhere_names_the_root_to_pass(photos, tmp_path):
    """Not "packed 0 images ..., skipped 4" and status 0 (``python -m gpupipe.pack`` prints it as ``error: ...``)."""
    from gpupipe.pack.__main__ import main as pack_main

    list_file = _list(tmp_path, [p for p in USER_FILES if p.startswith("cats/")])
    with pytest.raises(ValueError) as err:
        pack_main([str(list_file), str(tmp_path / "packed"), "-q"])
    assert str(err.value).startswith(f"FileList: none of the 4 files {list_file} names exists")
    assert str(err.value).endswith(f"pass root={str(photos)!r} (or move the list file there)")
    assert not (tmp_path / "packed").exists()


# -- the pages against the code ----------------------------------------------------------------------------------


def test_the_loader_page_signature_is_the_code_s():
    """docs/loader.md opens with gpupipe.loader's signature: every argument, with its default."""
    import inspect
    import re

    page = (Path(__file__).resolve().parents[1] / "docs" / "loader.md").read_text()
    shown = re.search(r"```python\ngpupipe\.loader\((.*?)\)\n```", page, re.S).group(1)
    params = inspect.signature(gpupipe.loader).parameters
    written = [p.strip() for p in shown.replace("\n", " ").split(",") if p.strip() not in ("*", "")]
    assert [w.split("=")[0] for w in written] == list(params)
    for word in written:
        if "=" in word:
            name, default = word.split("=")
            assert eval(default) == params[name].default, word


def test_a_tilde_the_shell_left_in_a_command_s_paths_is_the_home_folder(monkeypatch, tmp_path):
    """``--out=~/results`` and ``--staging=~/s`` reach Python unexpanded (bash expands ``~`` only at a word's start)."""
    from gpupipe.bench.args import parse_args
    from gpupipe.pack.__main__ import parse_args as pack_args

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    args = parse_args(["--out=~/results", "--cache-dir=~/cache", "--data=~/photos"])
    assert (args.out, args.cache_dir, args.data) == (tmp_path / "results", tmp_path / "cache", tmp_path / "photos")
    args = pack_args(["~/photos", "~/packed", "--staging=~/stage"])
    assert (Path(args.src), Path(args.dst), Path(args.staging)) == (
        tmp_path / "photos",
        tmp_path / "packed",
        tmp_path / "stage",
    )
    (tmp_path / "packed").mkdir()
    assert pack_args(["--verify", "~/packed"]).dst == str(tmp_path / "packed")
    assert pack_args(["~/photos", "s3://bucket/~/packed"]).dst == "s3://bucket/~/packed"  # a URL as it is


# -- an annotation file given as the source ----------------------------------------------------------------------

PAIRS_HINT = (
    "is a JSON file, not a folder or a list file: load its (path, label) pairs and pass gpupipe.FileList(pairs)"
)


@pytest.mark.parametrize(
    "name, text, said",
    [
        (
            "instances_train.json",
            '{\n  "images": [{"id": 1, "file_name": "a.jpg"}],\n  "annotations": []\n}',
            "is a JSON file (COCO annotations), not a folder or a list file: read it with "
            "gpupipe.CocoDetection(IMAGES_FOLDER, ",
        ),
        (
            "pairs.json",
            '[["cats/a.jpg", 0], ["dogs/b.jpg", 1]]',
            PAIRS_HINT,
        ),
        (
            "train.jsonl",
            '{"file": "cats/a.jpg", "label": 0}\n{"file": "dogs/b.jpg", "label": 1}\n',
            PAIRS_HINT,
        ),
        (
            "data.yaml",
            "path: ../datasets/coco8\ntrain: images/train\nnames:\n  0: person\n",
            "is a YAML file, not a folder or a list file: pass the image folder, or a list file of 'path label' lines",
        ),
    ],
)
def test_an_annotation_file_given_as_the_source_is_named_as_such(tmp_path, name, text, said):
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError) as err:
        gpupipe.loader(str(tmp_path / name), "val", batch_size=2)
    assert str(err.value).startswith(f"{tmp_path / name} {said}"), str(err.value)


def test_a_list_file_whose_first_path_starts_with_a_bracket_is_still_a_list(tmp_path):
    write_image(tmp_path / "[2023] trip" / "a.jpg", np.zeros((8, 8, 3), np.uint8))
    (tmp_path / "list.txt").write_text("[2023] trip/a.jpg 0\n")
    assert gpupipe.FileList(tmp_path / "list.txt").names == [str(tmp_path / "[2023] trip" / "a.jpg")]
