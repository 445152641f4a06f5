"""The bench's figures from its measured rounds: medians, spreads, ratios to the baseline, fractions of
the ceiling and verdicts (``summarise``), with the backends that failed and an interruption."""

from __future__ import annotations

from . import measure
from .advice import BASELINE
from .args import BenchError

#: The name of the ceiling's loop in the measured rounds (as ``runner.CEILING``).
CEILING = "ceiling"


def summarise(measured: dict, config) -> dict:
    """Medians, spreads, ratios to the baseline, fractions of the ceiling and verdicts (``config``: the run's
    ``runner.BenchConfig``); the backends that failed (``"failed"``: ``{backend: reason}``) and an
    interruption (``"interrupted"``), where there were.

    Raises:
        BenchError: every backend failed (each named with its reason).
    """
    failed = dict(measured.get("failed", {}))
    names = [name for name in config.backends if name not in failed]
    if not names:
        raise BenchError("every backend failed: " + "; ".join(f"{n}: {why}" for n, why in failed.items()))
    results: dict = {name: {} for name in names}
    for name in names:
        loader = measured["loader"][name]
        results[name]["loader"] = _figures(measure.Result.of(loader["runs"]), loader["boundaries"])
        results[name]["loader"]["batches"] = loader["batches"]
        results[name]["loader_resources"] = loader["resources"]
    figures: dict = {"results": results, "failed": failed}
    if "interrupted" in measured:
        figures["interrupted"] = measured["interrupted"]
    if "train" in measured:
        top = measure.Result.of(measured["train"][CEILING]["runs"])
        figures["ceiling"] = {**_figures(top), "resources": measured["train"][CEILING]["resources"]}
        for name in names:
            entry = measured["train"][name]
            train = measure.Result.of(entry["runs"], entry["waits"])
            v = measure.verdict(train, top, backend=name, on_gpu=config.device.type == "cuda", threads=config.threads)
            results[name]["train"] = {
                **_figures(train),
                "wait_share": None if train.wait_share is None else round(train.wait_share, 3),
                "wait_shares": [round(x, 3) for x in train.wait_shares],
                "fraction_of_ceiling": round(v.fraction_of_ceiling, 3),
                "batches": entry["batches"],
            }
            results[name]["train_resources"] = entry["resources"]
            results[name]["verdict"] = {"bound": v.bound, "suggestion": v.suggestion}
    _add_speedups(results)
    return figures


def _figures(result: measure.Result, boundaries: list[float] | None = None) -> dict:
    out = {
        "images_per_s": round(result.images_per_s, 1),
        "min": round(result.low, 1),
        "max": round(result.high, 1),
        "spread": round(result.spread, 3),
        "runs": [round(v, 1) for v in result.runs],
    }
    if boundaries:
        out["epoch_boundary_s"] = round(sorted(boundaries)[len(boundaries) // 2], 4)
    return out


def _add_speedups(results: dict[str, dict]) -> None:
    """Adds each backend's ratio to the baseline, measured in the same run."""
    base = results.get(BASELINE)
    if not base:
        return
    for entry in results.values():
        entry["loader"]["x_baseline"] = round(entry["loader"]["images_per_s"] / base["loader"]["images_per_s"], 2)
        if "train" in entry:
            entry["train"]["x_baseline"] = round(entry["train"]["images_per_s"] / base["train"]["images_per_s"], 2)
