"""``python -m gpupipe``: what gpupipe's commands are (it runs none of them)."""

from __future__ import annotations

import shlex
import sys

from ._version import __version__

COMMANDS = """gpupipe {version}: image pipelines compiled to NVIDIA DALI (or run by torchvision) behind one DataLoader.

Commands:
  python -m gpupipe.bench [--data FOLDER]   feed one AMP training loop from every backend; say which is faster, why
  python -m gpupipe.pack SRC DST            pack an image folder or list file into validated shards
  python -m gpupipe.demo OUT                write synthetic demo data (classification, segmentation, detection)

Each takes --help. In a script: import gpupipe; loader = gpupipe.loader("FOLDER", "train", batch_size=256)
"""


#: What ``python -m gpupipe`` takes: nothing, or a request for this list (or the version).
_LISTING = {"-h", "--help", "help", "--version", "-V"}


def main(argv: list[str] | None = None) -> int:
    """Prints the commands; exit status 0. Given a command's name (``python -m gpupipe bench --data x``, as
    ``git bench`` is typed) or anything else, it runs nothing: one ``error:`` line says the command to type
    (``python -m gpupipe.bench --data x``), exit status 2."""
    from .cli import EXIT_ERROR

    args = sys.argv[1:] if argv is None else list(argv)
    if args and not set(args) <= _LISTING:
        command = next((c for c in ("bench", "pack", "demo") if args[0].lower() in (c, f"gpupipe.{c}")), None)
        if command is not None:
            typed = " ".join(["python", "-m", f"gpupipe.{command}", *map(shlex.quote, args[1:])])
            print(f"error: python -m gpupipe runs no command; type: {typed}", file=sys.stderr)
        else:
            print(
                f"error: python -m gpupipe takes no arguments (got {' '.join(map(shlex.quote, args))}); its commands "
                "are python -m gpupipe.bench, python -m gpupipe.pack and python -m gpupipe.demo (each takes --help)",
                file=sys.stderr,
            )
        return EXIT_ERROR
    sys.stdout.write(COMMANDS.format(version=__version__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
