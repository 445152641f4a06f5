"""Writes the bench's synthetic demo photos into a folder (the bench does this itself, cached).

    python datasets/make_demo.py OUT [--classes 10] [--per-class 100] [--quality 90]

The images are "dead leaves" scenes over 1/f noise, sides 300-700 px, about
100 KiB each: see gpupipe/bench/demo.py. Prints the folder's statistics.
"""

import argparse
import json
from pathlib import Path

from gpupipe.bench import demo


def main() -> None:
    parser = argparse.ArgumentParser(description="Generate the gpupipe demo image folder.")
    parser.add_argument("out", type=Path, help="folder to write root/<class>/<image>.jpg into")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--per-class", type=int, default=100)
    parser.add_argument("--quality", type=int, default=90, help="JPEG quality")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    args = parser.parse_args()
    spec = demo.DemoSpec(classes=args.classes, per_class=args.per_class, quality=args.quality, seed=args.seed)
    demo.generate(args.out, spec, args.workers)
    print(json.dumps(demo.folder_stats(args.out), indent=2))


if __name__ == "__main__":
    main()
