"""``python -m gpupipe``: what gpupipe's commands are (it runs none of them)."""

from __future__ import annotations

import sys

from ._version import __version__

COMMANDS = """gpupipe {version}: image pipelines compiled to NVIDIA DALI (or run by torchvision) behind one DataLoader.

Commands:
  python -m gpupipe.bench [--data FOLDER]   feed one AMP training loop from every backend; say which is faster, why
  python -m gpupipe.pack SRC DST            pack an image folder or list file into validated shards
  python -m gpupipe.demo OUT                write synthetic demo data (classification, segmentation, detection)

Each takes --help. In a script: import gpupipe; loader = gpupipe.loader("FOLDER", "train", batch_size=256)
"""


def main() -> int:
    """Prints the commands; exit status 0."""
    sys.stdout.write(COMMANDS.format(version=__version__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
