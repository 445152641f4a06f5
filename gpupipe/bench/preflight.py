"""What the bench checks before it measures anything, so that a mistake costs seconds, not a whole run:
where it will write, the data's files, the batch against the data and the memory, the model's name; and the
data's statistics, from the files the loaders read."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import numpy as np

from ..checks import did_you_mean
from ..errors import plural
from .args import BenchError


def check_out(out: Path) -> None:
    """Makes the ``--out`` folder and writes a file there (removed at once), as the bench will at the end.

    Raises:
        BenchError: naming ``--out`` and why (a file there, a file on the way, no permission, a full disk, or
            a name like ``results/bench.json`` that is no folder yet: the file meant, not its folder).
    """
    if Path(out).suffix.lower() in (".json", ".png") and not Path(out).is_dir():
        raise BenchError(
            f"--out {out}: --out is the folder bench.json and bench.png are written into, not a file's name: "
            f"pass --out {Path(out).parent}"
        )
    why = unwritable(out)
    if why:
        raise BenchError(f"--out {out}: cannot write bench.json there ({why}); pass another folder")


def check_out_outside(out: Path, data: Path) -> None:
    """An ``--out`` inside the image folder ``--data`` would be scanned as a class folder by the next run,
    its ``bench.png`` an image of that class.

    Raises:
        BenchError: naming both, before the folder is made.
    """
    inside, root = Path(out).resolve(), Path(data).resolve()
    if inside != root and root not in inside.parents:
        return
    part = inside.relative_to(root).parts
    what = f"as an image of a class {part[0]!r}" if part else "as an image of the data's own"
    raise BenchError(
        f"--out {out} lies inside --data {data}: the next run would read bench.png there {what}; pass a folder "
        "outside it"
    )


def check_cache_dir(cache_dir: Path, from_env: bool) -> None:
    """Makes the ``--cache-dir`` folder and writes a file there (removed at once), before the demo set is
    built in it: a folder that cannot hold it fails in seconds, naming the flag, not mid-build with an errno.

    Args:
        from_env: ``cache_dir`` is the flag's default, gpupipe's cache folder (``$GPUPIPE_CACHE``).

    Raises:
        BenchError: naming ``--cache-dir`` (and ``$GPUPIPE_CACHE``, where it came from) and why.
    """
    why = unwritable(cache_dir)
    if why:
        where = " (the default: gpupipe's cache folder, set by $GPUPIPE_CACHE or $XDG_CACHE_HOME)" if from_env else ""
        raise BenchError(
            f"--cache-dir {cache_dir}{where}: cannot write the demo data there ({why}); pass another folder "
            "with --cache-dir or set $GPUPIPE_CACHE, or bench your own images with --data"
        )


def unwritable(folder: Path) -> str | None:
    """Why ``folder`` cannot be made and written into (a file there, a file on the way, no permission, a full
    disk), or ``None`` where it can: it is made, and a probe file written there and removed."""
    probe = Path(folder) / f".gpupipe-bench-{uuid.uuid4().hex}"
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        if isinstance(err, FileExistsError) or (Path(folder).exists() and not Path(folder).is_dir()):
            return "a file, not a folder"
        if isinstance(err, (NotADirectoryError, FileNotFoundError)):
            return "a file on its path is not a folder"
        return err.strerror or str(err)
    return None


def check_batch(images: int, batch_size: int, data: str | None) -> None:
    """Every loader drops the last partial batch, so ``images`` under one batch gives none.

    Args:
        data: the ``--data`` given, ``None`` for the demo set.

    Raises:
        BenchError: naming ``--batch-size``, the images there are and the flag that fixes it.
    """
    if batch_size <= images:
        return
    where = f"--data {data}" if data is not None else "the demo set"
    fix = f"pass --batch-size {images} or less" + (
        "" if data is not None else f", or --demo-images {10 * batch_size} or more"
    )
    raise BenchError(
        f"--batch-size {batch_size} is more than the {plural(images, 'image')} of {where}: every loader drops the last "
        f"partial batch, so none would be produced; {fix}"
    )


def check_memory(batch_size: int, image_size: int, available: int | None = None) -> None:
    """One float32 batch (the ceiling's, kept on the device) must fit in memory with room for the model.

    Raises:
        BenchError: naming ``--batch-size`` and ``--image-size`` and the memory one batch needs.
    """
    if available is None:
        import psutil

        available = int(psutil.virtual_memory().total)
    needed = batch_size * 3 * image_size * image_size * 4
    if needed > available // 2:
        raise BenchError(
            f"--batch-size {batch_size} at --image-size {image_size} needs {needed / 2**30:.1f} GiB for one "
            f"float32 batch, more than half of this machine's {available / 2**30:.1f} GiB: pass smaller ones"
        )


def check_model(name: str) -> None:
    """Raises ``BenchError`` naming ``--model`` when torchvision has no model ``name``, with the one meant."""
    import torchvision

    known = torchvision.models.list_models()
    if name not in known:
        raise BenchError(
            f"--model: unknown torchvision model {name!r}{did_you_mean(name, known)}; "
            "torchvision.models.list_models() lists them"
        )


def refuse_bad_files(source, data, listed: int = 3) -> None:
    """Refuses a folder holding files no loader can use (the scan every gpupipe loader makes), naming them,
    before anything is measured: the tutorial baseline would stop at the first, gpupipe's loaders at build.

    Raises:
        BenchError: naming how many, the first ``listed`` with their reasons, and the pack that leaves them out.
    """
    bad = source.scan().bad
    if not bad:
        return
    named = "; ".join(f"{source.names[i]}: {reason}" for i, reason in sorted(bad.items())[:listed])
    more = f"; and {len(bad) - listed} more" if len(bad) > listed else ""
    raise BenchError(
        f"--data: {len(bad)} of {plural(len(source), 'file')} cannot be used ({named}{more}): remove them, or "
        f"pack the folder (python -m gpupipe.pack {data} PACKED leaves them out and lists them) and pass --data PACKED"
    )


def data_stats(source) -> dict:
    """Image count, classes and sizes of what the loaders read: a pack's from its manifest, a folder's
    from its files' headers (nested folders included, files the loaders leave out not counted).

    Returns:
        ``{"images", "classes", "mean_kib", "median_kib", "total_mib", "mean_width", "mean_height",
        "min_side", "max_side", "max_short_side"}`` (the last: the largest shorter side of an image, which
        says whether pre-resizing would shrink any).
    """
    manifest = getattr(source, "manifest", None)
    if manifest is not None:
        sizes = np.asarray([s for shard in manifest["shards"] for s in shard.get("sizes", [])], np.float64)
        sizes = sizes.reshape(-1, 2)[(sizes.reshape(-1, 2) > 0).all(axis=1)]  # [h, w]; -1: not recorded
        count, total = len(source), int(manifest["totals"]["bytes"])
        kib = np.full(1, total / 1024 / max(1, count))
        heights, widths = (sizes[:, 0], sizes[:, 1]) if len(sizes) else (np.zeros(1), np.zeros(1))
    else:  # the sizes the loaders' scan read from the headers (cached: no file is opened again)
        kib = np.asarray([os.path.getsize(name) for name in source.names], np.float64) / 1024
        sizes = source.scan().sizes.astype(np.float64)
        sizes = sizes[(sizes > 0).all(axis=1)]
        heights, widths = (sizes[:, 0], sizes[:, 1]) if len(sizes) else (np.zeros(1), np.zeros(1))
        count, total = len(source), int(kib.sum() * 1024)
    return {
        "images": count,
        "classes": len(source.classes),
        "mean_kib": round(float(kib.mean()), 1),
        "median_kib": round(float(np.median(kib)), 1),
        "total_mib": round(total / 2**20, 1),
        "mean_width": round(float(widths.mean()), 1),
        "mean_height": round(float(heights.mean()), 1),
        "min_side": int(min(widths.min(), heights.min())),
        "max_side": int(max(widths.max(), heights.max())),
        "max_short_side": int(np.minimum(widths, heights).max()),
    }
