"""What the bench concludes from its figures, and only from them.

Every function here reads a bench report (the dict written to ``bench.json``),
so the same conclusions come from a fresh run and from recorded figures:

- ``verdict_text``: a backend's verdict with its reason inline, e.g.
  ``input-bound: 73% of the model's ceiling, under 90%``.
- ``suggestions``: what to try per input-bound backend, never naming a
  backend that the table shows no faster.
- ``ratios_withheld``: why no ratio to the baseline is given when the
  timed windows crossed epoch boundaries (a tiny dataset times each epoch's
  start-up, not the loader's throughput).
- ``versus_baseline``: why a ratio to the baseline is no measured difference
  (``within spread``: the ranges overlap; ``1 repeat``: no spread measured).
- ``winner_line``: the one line naming the fastest backend for training
  on this machine, with the figures that make it so.
"""

from __future__ import annotations

from ..loading.stats import WAIT_SHARE_INPUT_BOUND
from .measure import CEILING_FRACTION_COMPUTE_BOUND, advice

#: The tutorial loader every backend is compared with.
BASELINE = "baseline"


def verdict_text(entry: dict) -> str:
    """``input-bound`` / ``compute-bound`` with the measured figure that decided it and the rule."""
    train = entry.get("train") or {}
    fraction, wait = train.get("fraction_of_ceiling"), train.get("wait_share")
    if fraction is None:
        return (entry.get("verdict") or {}).get("bound", "-")
    share = _percent(fraction, CEILING_FRACTION_COMPUTE_BOUND)
    waits = _percent(wait or 0.0, WAIT_SHARE_INPUT_BOUND)
    if (wait or 0.0) >= WAIT_SHARE_INPUT_BOUND:
        return f"input-bound: waits for data {waits} of the time, {100 * WAIT_SHARE_INPUT_BOUND:.0f}% or more"
    if fraction < CEILING_FRACTION_COMPUTE_BOUND:
        return (
            f"input-bound: {share} of the model's ceiling, under {100 * CEILING_FRACTION_COMPUTE_BOUND:.0f}% "
            f"(data wait {waits})"
        )
    return f"compute-bound: {share} of the model's ceiling, data wait {waits}"


def _percent(value: float, threshold: float) -> str:
    """``value`` in whole percent, with the digits it takes not to read as ``threshold`` when on the
    other side of it (``89.8%`` under a rule of 90%, not ``90%``)."""
    for digits in range(4):
        text = f"{100 * value:.{digits}f}"
        if (float(text) < 100 * threshold) == (value < threshold):
            return f"{text}%"
    return f"just under {100 * threshold:.0f}%"  # within 0.0005 % of it


def _phase(report: dict) -> str:
    """``train`` where the training loop was measured, else ``loader``."""
    return "train" if any("train" in e for e in report["results"].values()) else "loader"


def _figure(report: dict, name: str) -> dict:
    return report["results"][name].get(_phase(report)) or {}


def clearly_faster(report: dict, name: str, than: str) -> bool:
    """``name``'s slowest repeat beat ``than``'s fastest (the ranges do not overlap), over two repeats or more:
    one repeat has no spread to tell a difference from noise (``single_repeat``)."""
    a, b = _figure(report, name), _figure(report, than)
    if not (a and b) or single_repeat(report, a) or single_repeat(report, b):
        return False
    return a.get("min", a["images_per_s"]) > b.get("max", b["images_per_s"])


def single_repeat(report: dict, figure: dict | None = None) -> bool:
    """The figures rest on one repeat each (``figure``'s own ``runs`` where it lists them, else the repeats
    done or planned): no spread was measured."""
    if figure is not None and "runs" in figure:
        return len(figure["runs"]) == 1
    return ((report.get("interrupted") or {}).get("repeats_done") or report.get("settings", {}).get("repeats")) == 1


def versus_baseline(report: dict, name: str, phase: str) -> str:
    """``""`` where ``name``'s repeats in ``phase`` (``loader`` or ``train``) are apart from the baseline's (the
    ratio is a measured difference, as ``clearly_faster``); else why not: ``within spread`` (the ranges overlap)
    or ``1 repeat`` (no spread measured). ``""`` for the baseline itself or where either was not measured."""
    a = report["results"][name].get(phase) or {}
    b = (report["results"].get(BASELINE) or {}).get(phase) or {}
    if name == BASELINE or not (a and b):
        return ""
    if single_repeat(report, a) or single_repeat(report, b):
        return "1 repeat"
    apart = a.get("min", a["images_per_s"]) > b.get("max", b["images_per_s"]) or b.get(
        "min", b["images_per_s"]
    ) > a.get("max", a["images_per_s"])
    return "" if apart else "within spread"


def ratio_range(report: dict, name: str, phase: str) -> list[float] | None:
    """``[lowest, highest]`` ratio of ``name``'s repeats to the baseline's in ``phase`` (its slowest over the
    baseline's fastest, its fastest over the baseline's slowest); ``None`` where either lacks a range."""
    a = report["results"][name].get(phase) or {}
    b = (report["results"].get(BASELINE) or {}).get(phase) or {}
    if not all(key in figure for figure in (a, b) for key in ("min", "max")) or not (b["min"] and b["max"]):
        return None
    return [round(a["min"] / b["max"], 2), round(a["max"] / b["min"], 2)]


def ranked(report: dict) -> list[str]:
    """Backends by median images/s, fastest first (training where measured, else the loader alone)."""
    names = [n for n in report["results"] if _figure(report, n)]
    return sorted(names, key=lambda n: -_figure(report, n)["images_per_s"])


def suggestions(report: dict) -> dict[str, str]:
    """What to try, per input-bound backend: the measured faster backend where the table shows one,
    else the general advice, left out where it names a backend measured here and not faster."""
    settings = report.get("settings", {})
    on_gpu = str(settings.get("device", "cpu")).startswith("cuda")
    # on a CPU the model and the loading share the machine's cores (however many threads load); on a GPU,
    # the advice is about the loader's own threads
    threads = settings.get("threads", 1) if on_gpu else report.get("machine", {}).get("cpu_cores_usable") or 1
    sizes = resize_to(report)
    out: dict[str, str] = {}
    # on data too small to time throughput (see ratios_withheld) no backend is called faster than another
    order = [] if ratios_withheld(report) else ranked(report)
    for name, entry in report["results"].items():
        if not verdict_text(entry).startswith("input-bound"):
            continue
        better = [n for n in order if n not in (name, BASELINE) and clearly_faster(report, n, name)]
        if better:
            best, figure = better[0], _figure(report, better[0])
            out[name] = (
                f"use backend='{best}': it {_verb(report)} {figure['images_per_s']:.1f} img/s here against "
                f"{_figure(report, name)['images_per_s']:.1f}"
            )
            continue
        share = None if on_gpu else _cpu_share(entry, threads)
        text = advice(name, on_gpu, threads, *sizes, cpu_share=share)
        if any(f"'{n}'" in text or f" {n} " in text for n in report["results"] if n != name):
            text = advice("", on_gpu, threads, *sizes, cpu_share=share)  # it named a backend the table shows no faster
        lacking = [why for n, why in (report.get("unavailable") or {}).items() if f"'{n}'" in text]
        if on_gpu and lacking:  # (on a CPU the advice names dali for a GPU, which it needs)
            text += f" (not available here: {lacking[0]})"
        out[name] = text
    return out


def _cpu_share(entry: dict, cores: int) -> float | None:
    """The share of ``cores`` the training loop's process tree kept busy, as the monitor measured it (its mean
    CPU %, of one core, over ``100 * cores``; at most 1, as sampling can overshoot); ``None`` where the report
    does not give it."""
    percent = (entry.get("train_resources") or {}).get("cpu_percent")
    return None if percent is None else min(1.0, percent / (100 * max(cores, 1)))


def resize_to(report: dict) -> tuple[int, int | None]:
    """``(the shorter side to pre-resize to, the data's largest shorter side where no image is larger)``:
    ImageNet's 256 px for a 224 px crop, scaled with ``--image-size``; the second is ``None`` where some image
    is larger (pre-resizing would shrink it) or the report does not say (recorded before it did)."""
    resize = round(report.get("settings", {}).get("image_size", 224) * 256 / 224)
    short = (report.get("data") or {}).get("max_short_side")
    return resize, (short if short is not None and short <= resize else None)


def _verb(report: dict) -> str:
    return "trained at" if _phase(report) == "train" else "loaded"


def crossings(entry: dict) -> int:
    """Epoch boundaries inside the timed windows of a backend's repeats (loader alone and training)."""
    return sum(
        b.get("boundaries_timed", 0)
        for phase in ("loader", "train")
        for b in (entry.get(phase) or {}).get("batches", [])
    )


def ratios_withheld(report: dict) -> str | None:
    """Why no ratio is given, where a timed window crossed an epoch boundary; ``None`` otherwise."""
    crossed = {name: crossings(entry) for name, entry in report["results"].items()}
    if not any(crossed.values()):
        return None
    s = report.get("settings", {})
    batch = s.get("batch_size", 1)
    window = max(s.get("warmup", 0) + s.get("steps", 0), s.get("train_warmup", 0) + s.get("train_steps", 0))
    images = report.get("data", {}).get("images")
    held = f"{images} images make {images // batch} batch(es) of {batch} per epoch; " if images is not None else ""
    which = ", ".join(f"{n}: {c}" for n, c in crossed.items() if c)
    return (
        f"the timed windows crossed epoch boundaries ({which}, over all repeats): {held}a repeat needs "
        f"{window} batches, so the figures time each epoch's start-up (worker processes, pipeline builds), "
        "which a real epoch spreads over many batches; no ratio is given: bench a folder of at least "
        f"{window * batch} images"
    )


def _label(name: str) -> str:
    return "the tutorial DataLoader (baseline)" if name == BASELINE else name


def _range(figure: dict) -> str:
    return f"{figure['images_per_s']:.1f} img/s ({figure.get('min', 0):.1f}-{figure.get('max', 0):.1f})"


def winner_line(report: dict) -> str:
    """One line: the fastest backend for training on this machine, and why, from the measured figures."""
    order = ranked(report)
    if not order:
        return "fastest backend: none measured" + _failed_note(report)
    what = "for training" if _phase(report) == "train" else "for loading (training not measured)"
    best = order[0]
    figure, verdict = _figure(report, best), verdict_text(report["results"][best])
    verdict = "" if verdict == "-" else f"; {verdict}"  # no verdict without training
    head = f"fastest backend {what} on this machine: {_label(best)} at {_range(figure)}"
    level = len(order) > 1 and not clearly_faster(report, best, order[1])
    if level:
        second = _label(order[1]), _range(_figure(report, order[1]))
        both = f"{_label(best)} at {_range(figure)} is level with {second[0]} at {second[1]}"
        why = (
            "from 1 repeat, which measures no spread: nothing tells the two apart from noise (pass --repeats 3)"
            if single_repeat(report, figure) or single_repeat(report, _figure(report, order[1]))
            else "within the spread of the repeats: either will do"
        )
        head = f"fastest backend {what} on this machine: no clear difference: {both} {why}"
    if ratios_withheld(report):
        return (
            f"{head}, on this data only: the timed windows crossed epoch boundaries, no ratio given (see the warning)"
            + _failed_note(report)
        )
    if len(order) == 1:
        line = f"{head}, the only one measured{verdict}"
    elif level:  # whose verdict it is, where two are named
        line = f"{head}{verdict.replace('; ', f'; {_label(best)}: ', 1)}"
    else:
        runner_up = _figure(report, order[1])
        ratio = figure["images_per_s"] / runner_up["images_per_s"] if runner_up["images_per_s"] else float("inf")
        line = f"{head}, {ratio:.2f}x the next, {_label(order[1])} at {_range(runner_up)}{verdict}"
        if best == BASELINE:
            line += "; no gpupipe backend beat the tutorial DataLoader here"
    if report.get("reliability"):
        line += "; the figures may not be reliable (see the warning)"
    return line + _failed_note(report)


def _failed_note(report: dict) -> str:
    """``; dali-cpu failed (see above)``, naming the backends that failed, and ``; interrupted after 1 of 3
    repeats`` after Ctrl-C; ``""`` without either."""
    failed, stopped = report.get("failed") or {}, report.get("interrupted")
    note = f"; {', '.join(failed)} failed (see above)" if failed else ""
    if stopped:
        note += f"; interrupted after {stopped['repeats_done']} of {stopped['repeats_planned']} repeats"
    return note


def conclude(report: dict) -> None:
    """Writes the conclusions into ``report`` (for ``bench.json``): each verdict's reason and
    suggestion, the ratios withheld and why, the range of each ratio to the baseline over the repeats
    (``x_baseline_range``) and whether it is a measured difference (``x_baseline_clear``), and the winner's
    line."""
    withheld = ratios_withheld(report)
    tips = suggestions(report)
    for name, entry in report["results"].items():
        for phase in ("loader", "train"):
            figure = entry.get(phase) or {}
            if withheld:
                for key in ("x_baseline", "x_baseline_range", "x_baseline_clear"):
                    figure.pop(key, None)
            elif "x_baseline" in figure and name != BASELINE:
                figure["x_baseline_range"] = ratio_range(report, name, phase)
                figure["x_baseline_clear"] = not versus_baseline(report, name, phase)
        if "verdict" in entry:
            entry["verdict"]["reason"] = verdict_text(entry)
            entry["verdict"]["suggestion"] = tips.get(name, "")
    report["ratios_withheld"] = withheld
    report["winner"] = winner_line(report)
