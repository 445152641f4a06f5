"""The dataset scripts: demo generation and Imagenette preparation from a local archive."""

import subprocess
import sys
import tarfile
from pathlib import Path

from helpers import make_image_folder

SCRIPTS = Path(__file__).parents[1] / "datasets"


def test_make_demo_writes_class_folders(tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, str(SCRIPTS / "make_demo.py"), str(out), "--classes", "2", "--per-class", "2"],
                          capture_output=True, text=True, check=True)
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["class_00", "class_01"]
    assert len(list(out.glob("*/*.jpg"))) == 4
    assert '"images": 4' in proc.stdout


def test_prepare_imagenette_from_a_local_archive(tmp_path):
    tree = tmp_path / "src" / "imagenette2-160"
    for split in ("train", "val"):
        make_image_folder(tree / split, {"n01440764": 2, "n02102040": 1}, ext=".JPEG")
    archive = tmp_path / "imagenette2-160.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tree, arcname="imagenette2-160")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(SCRIPTS / "prepare_imagenette.py"), "--archive", str(archive),
                           "--out", str(out)], capture_output=True, text=True, check=True)
    assert len(list((out / "imagenette2-160" / "train").glob("*/*.JPEG"))) == 3
    assert proc.stdout.count('"classes": 2') == 2
