"""Prepares Imagenette (10 ImageNet classes, fast.ai) as image folders for gpupipe and its bench.

    python datasets/prepare_imagenette.py --archive imagenette2-320.tgz --out data/
    python datasets/prepare_imagenette.py --download --size 320 --out data/   # where a network exists

Gives ``OUT/imagenette2-<size>/{train,val}/<wnid>/*.JPEG`` (class folders
sorted by WordNet id, as in ImageNet), then prints each split's statistics.
Run the bench on it with ``python -m gpupipe.bench --data OUT/imagenette2-320/train``.
"""

import argparse
import json
import shutil
import tarfile
import urllib.request
from pathlib import Path

from gpupipe.demo.photos import folder_stats

URL = "https://s3.amazonaws.com/fast-ai-imageclas/imagenette2{suffix}.tgz"
SUFFIXES = {"full": "", "320": "-320", "160": "-160"}


def download(size: str, dest: Path) -> Path:
    url = URL.format(suffix=SUFFIXES[size])
    target = dest / url.rsplit("/", 1)[1]
    if not target.exists():
        print(f"downloading {url} ...")
        partial = target.with_suffix(".part")
        with urllib.request.urlopen(url) as response, open(partial, "wb") as fh:
            shutil.copyfileobj(response, fh)
        partial.rename(target)
    return target


def extract(archive: Path, out: Path) -> Path:
    with tarfile.open(archive) as tar:
        top = {Path(m.name).parts[0] for m in tar.getmembers() if m.name.strip("./")}
        if len(top) != 1:
            raise SystemExit(f"{archive}: expected one top folder, found {sorted(top)[:5]}")
        root = out / top.pop()
        if not (root / "train").is_dir():
            tar.extractall(out, filter="data")
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description="Prepare Imagenette as image folders.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--archive", type=Path, help="a local imagenette2*.tgz")
    source.add_argument("--download", action="store_true", help="download the archive first")
    parser.add_argument("--size", choices=sorted(SUFFIXES), default="320", help="variant to download")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    archive = download(args.size, args.out) if args.download else args.archive
    if not archive.is_file():
        raise SystemExit(f"--archive: {archive} does not exist")
    root = extract(archive, args.out)
    for split in ("train", "val"):
        print(split, json.dumps(folder_stats(root / split)))


if __name__ == "__main__":
    main()
