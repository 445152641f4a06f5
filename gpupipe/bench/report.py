"""The bench's output: machine description, reliability warnings, terminal table, JSON and PNG chart."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
from pathlib import Path

import torch

from .. import env
from ..errors import plural
from ..loading.stats import WAIT_SHARE_INPUT_BOUND
from . import advice
from .measure import CEILING_FRACTION_COMPUTE_BOUND, SPREAD_WARNING

#: Other processes using more than this share of the machine's CPU make the figures unreliable.
BUSY_SHARE = 0.10
PACKAGES = ("torch", "torchvision", "nvidia-dali-cuda120", "nvidia-dali-cuda130", "pillow", "numpy", "nvidia-ml-py")


def machine_info(device: torch.device) -> dict:
    """CPU, memory, load, GPU and library versions of this machine."""
    import psutil

    cpu_model = platform.processor()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu_model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu_model)
    except OSError:
        pass
    info = {
        "platform": platform.platform(),
        "cpu": cpu_model,
        "cpu_cores": os.cpu_count(),
        "cpu_cores_usable": env.cores(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "load_average": [round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "gpu": None,
        "versions": {"python": platform.python_version()},
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["gpu"] = {
            "name": props.name,
            "memory_gib": round(props.total_memory / 2**30, 1),
            "cuda": torch.version.cuda,
            "driver": _driver_version(),
        }
    for package in PACKAGES:
        try:
            info["versions"][package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            info["versions"][package] = None
    return info


def _driver_version() -> str | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
    except pynvml.NVMLError:
        return None
    return version.decode() if isinstance(version, bytes) else version


def hardware_label(machine: dict) -> str:
    """A short label, e.g. ``cpu-2core`` or ``NVIDIA-H100-80GB-HBM3-16core``."""
    cores = machine["cpu_cores_usable"]
    if machine.get("gpu"):
        return f"{machine['gpu']['name'].replace(' ', '-')}-{cores}core"
    return f"cpu-{cores}core"


def reliability(report: dict) -> list[str]:
    """Why the figures (and so the verdicts) may not be trusted: a wide spread, a busy machine,
    a loop reported above its ceiling. Empty when nothing stands out."""
    notes = []
    for name, entry in report["results"].items():
        for phase in ("loader", "train"):
            figure = entry.get(phase)
            if figure and figure.get("spread", 0) > SPREAD_WARNING:
                notes.append(
                    f"{name} {phase}: repeats spread {100 * figure['spread']:.0f}% "
                    f"({figure['min']:.0f}-{figure['max']:.0f} img/s around a median of {figure['images_per_s']:.0f})"
                )
        straddles = _straddles(entry.get("train") or {}, report.get("ceiling") or {})
        if straddles:
            notes.append(f"{name}: {straddles}")
        fraction = entry.get("train", {}).get("fraction_of_ceiling")
        if fraction is not None and fraction > 1.0:
            ceiling, train = report["ceiling"], entry["train"]
            ranges = (
                f"the ceiling's repeats ranged {ceiling['min']:.1f}-{ceiling['max']:.1f} img/s, this loop's "
                f"{train['min']:.1f}-{train['max']:.1f}"
            )
            why = (
                "they overlap: the two are equal within the noise"
                if train["min"] <= ceiling["max"]
                else "the ceiling's runs were slowed by something else on the machine"
            )
            notes.append(
                f"{name} reached {100 * fraction:.0f}% of the ceiling, which a loop with loading cannot "
                f"really beat: {ranges}; {why}"
            )
    repeats = (report.get("interrupted") or {}).get("repeats_done") or report.get("settings", {}).get("repeats")
    if repeats == 1:
        notes.append("1 repeat: no spread measured, so no difference between backends can be told from noise")
    ceiling = report.get("ceiling")
    if ceiling and ceiling.get("spread", 0) > SPREAD_WARNING:
        notes.append(f"the ceiling's repeats spread {100 * ceiling['spread']:.0f}%")
    machine = report["machine"]
    cores = machine["cpu_cores_usable"] or 1
    load = report.get("load_during", {})
    if load.get("load_average") and max(load["load_average"]) > cores + 0.5:
        notes.append(f"the machine was busy: load average {max(load['load_average']):.1f} on {cores} cores")
    if load.get("other_processes_cpu_percent", 0) > BUSY_SHARE * 100 * cores:
        notes.append(
            f"other processes used {load['other_processes_cpu_percent']:.0f}% CPU (of {100 * cores}%) during the run"
        )
    return notes


def _straddles(train: dict, ceiling: dict) -> str:
    """Why a verdict read from the fraction of the ceiling (the data wait under its rule) is not backed by the
    repeats: the loop's and the ceiling's ranges leave it on either side of the compute-bound fraction (every
    repeat under it: input-bound; every one at or above it: compute-bound); ``""`` where they settle it."""
    fraction = train.get("fraction_of_ceiling")
    if fraction is None or fraction > 1.0 or (train.get("wait_share") or 0.0) >= WAIT_SHARE_INPUT_BOUND:
        return ""
    if not all(key in figure for figure in (train, ceiling) for key in ("min", "max")):
        return ""
    rule = CEILING_FRACTION_COMPUTE_BOUND
    if train["max"] < rule * ceiling["min"] or train["min"] >= rule * ceiling["max"]:
        return ""
    return (
        f"its verdict rests on {100 * fraction:.0f}% of the ceiling, but its repeats ({train['min']:.1f}-"
        f"{train['max']:.1f} img/s) and the ceiling's ({ceiling['min']:.1f}-{ceiling['max']:.1f}) fall on both "
        f"sides of {100 * rule:.0f}% of it: input-bound and compute-bound cannot be told apart in this noise"
    )


def _fmt(value: float | None, spec: str = ".0f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _with_range(figure: dict, spec: str) -> str:
    if not figure:
        return "-"
    return f"{figure['images_per_s']:{spec}} ({figure['min']:{spec}}-{figure['max']:{spec}})"


def _ratio(report: dict, name: str, phase: str) -> str:
    """``1.20x``; ``~1.03x (within spread)`` or ``~1.10x (1 repeat)`` where the repeats do not tell it from 1.0
    (as the last line's "no clear difference")."""
    ratio = (report["results"][name].get(phase) or {}).get("x_baseline")
    why = "" if ratio is None else advice.versus_baseline(report, name, phase)
    return f"~{ratio:.2f}x ({why})" if why else _fmt(ratio, ".2f", "x")


def table_rows(report: dict) -> list[list[str]]:
    """The header and one row per backend of ``table`` (the documentation site renders them too)."""
    rows: list[list[str]] = [
        [
            "backend",
            "loader img/s (min-max)",
            "x baseline",
            "train img/s (min-max)",
            "x baseline",
            "data wait",
            "of ceiling",
            "epoch boundary",
            "CPU %",
            "peak RSS MiB",
            "GPU util",
            "verdict",
        ]
    ]
    withheld = "withheld" if advice.ratios_withheld(report) else None
    for name, entry in report["results"].items():
        train = entry.get("train", {})
        res = entry.get("train_resources") or entry.get("loader_resources", {})
        boundary = entry["loader"].get("epoch_boundary_s")
        rows.append(
            [
                name,
                _with_range(entry["loader"], ".0f"),
                withheld or _ratio(report, name, "loader"),
                _with_range(train, ".1f"),
                withheld or _ratio(report, name, "train"),
                _fmt(None if train.get("wait_share") is None else 100 * train["wait_share"], ".0f", "%"),
                _fmt(
                    None if train.get("fraction_of_ceiling") is None else 100 * train["fraction_of_ceiling"], ".0f", "%"
                ),
                _fmt(None if boundary is None else 1000 * boundary, ".0f", " ms"),
                _fmt(res.get("cpu_percent")),
                _fmt(res.get("peak_rss_mib")),
                _fmt(res.get("gpu_util_percent"), ".0f", "%"),
                advice.verdict_text(entry),
            ]
        )
    return rows


def measured_line(report: dict) -> str:
    """One line saying what the figures below it are: the data, each measurement with its batches and steps,
    and the repeats (the bench prints it above the table)."""
    s, data = report["settings"], report["data"]
    parts = [f"each loader alone ({_timed(report)} after {s['warmup']} of warm-up{_shortened(report)})"]
    if s["measure_training"]:
        parts.append(
            f"a {s['model']} training loop in {report['amp']['dtype']} ({plural(s['train_steps'], 'step')} after "
            f"{s['train_warmup']} of warm-up) and the same loop on one batch kept on the device (its ceiling)"
        )
    stopped = report.get("interrupted")
    repeats = (
        f"{stopped['repeats_done']} of {stopped['repeats_planned']} repeats of each (interrupted)"
        if stopped
        else f"{plural(s['repeats'], 'repeat')} of each"
    )
    return (
        f"measured on {report['machine']['label']}{_versions(report['machine'])}, {plural(data['images'], 'image')} in "
        f"{plural(data['classes'], 'class', 'classes')}, "
        f"batch {s['batch_size']} at {s['image_size']} px: {', '.join(parts)}; "
        f"{repeats}, interleaved; medians (min-max):"
    )


def _timed_counts(report: dict) -> list[int]:
    """The loader-alone batches each repeat of each backend timed (empty where the report does not list them)."""
    entries = (report.get("results") or {}).values()
    return [b["timed"] for e in entries for b in (e.get("loader") or {}).get("batches", []) if "timed" in b]


def _timed(report: dict) -> str:
    """``20 batches``, the loader-alone batches timed per repeat as measured (``18-20 batches`` where they
    differ), falling back to ``--steps``."""
    counts = _timed_counts(report) or [report["settings"]["steps"]]
    low, high = min(counts), max(counts)
    return plural(low, "batch", "batches") if low == high else f"{low}-{high} batches"


def _shortened(report: dict) -> str:
    """``; 20 asked, fewer to fit in one epoch`` where a window was shortened (``measure.loader_window``)."""
    asked = report["settings"]["steps"]
    return f"; {asked} asked, fewer to fit in one epoch" if min(_timed_counts(report), default=asked) < asked else ""


def _versions(machine: dict) -> str:
    """`` (torch 2.14.1, DALI 2.4.0, Python 3.11.7)``: what measured, where the report records it."""
    versions = machine.get("versions") or {}
    dali = versions.get("nvidia-dali-cuda130") or versions.get("nvidia-dali-cuda120")
    named = [("torch", versions.get("torch")), ("DALI", dali), ("Python", versions.get("python"))]
    listed = [f"{name} {version}" for name, version in named if version]
    return f" ({', '.join(listed)})" if listed else ""


def table(report: dict) -> str:
    """A Markdown table of every backend's figures (medians, with the min-max of the repeats)."""
    rows = table_rows(report)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    text = "\n".join(lines)
    if "ceiling" in report:
        c = report["ceiling"]
        text += (
            f"\n\nceiling ({report['settings']['model']}, one batch kept on the device): {c['images_per_s']:.1f} "
            f"img/s ({c['min']:.1f}-{c['max']:.1f})"
        )
    suggestions = [f"- {name}: {tip}" for name, tip in advice.suggestions(report).items() if tip]
    if suggestions:
        text += "\n\nsuggestions:\n" + "\n".join(suggestions)
    failed = report.get("failed") or {}
    if failed:
        text += "\n\nFAILED (not in the table):\n" + "\n".join(f"- {name}: {why}" for name, why in failed.items())
    stopped = report.get("interrupted")
    if stopped:
        text += (
            f"\n\nWARNING: interrupted (Ctrl-C) after {stopped['repeats_done']} of {stopped['repeats_planned']} "
            "repeats: the figures are those repeats' (the one under way was dropped)"
        )
    withheld = advice.ratios_withheld(report)
    if withheld:
        text += f"\n\nWARNING: no ratio to the baseline: {withheld}"
    notes = report.get("reliability") or []
    if notes:
        text += "\n\nWARNING: these figures may not be reliable, and the verdicts with them:\n" + "\n".join(
            f"- {n}" for n in notes
        )
    return text + "\n\n" + advice.winner_line(report)


def write_json(report: dict, path: Path) -> None:
    path.write_text(json.dumps(report, indent=2) + "\n")


def write_chart(report: dict, path: Path) -> None:
    """Two panels: throughput (loader alone, training, ceiling; error bars min-max, values on the bars)
    and the data-wait share, per backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["results"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [2, 1]})
    x = list(range(len(names)))
    series = [
        ("loader", "loader alone", "#4c72b0", -0.2),
        ("train", f"training ({report['settings']['model']})", "#dd8452", 0.2),
    ]
    for key, label, colour, offset in series:
        figures = [report["results"][n].get(key) for n in names]
        if not any(figures):
            continue
        values = [f["images_per_s"] if f else 0.0 for f in figures]
        errors = [
            [v - f["min"] if f else 0 for v, f in zip(values, figures)],
            [f["max"] - v if f else 0 for v, f in zip(values, figures)],
        ]
        bars = ax1.bar([i + offset for i in x], values, width=0.4, label=label, color=colour, yerr=errors, capsize=3)
        ax1.bar_label(bars, labels=[f"{v:.0f}" for v in values], padding=2, fontsize=7)
    if "ceiling" in report:
        ax1.axhline(report["ceiling"]["images_per_s"], color="#55a868", linestyle="--", label="ceiling (no loading)")
    ax1.set_xticks(x, names)
    ax1.set_ylabel("images / s (median; bars: min-max of the repeats)")
    ax1.set_yscale("log")
    ax1.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3, frameon=False)
    ax1.set_title("throughput (log scale)")
    wait = [100 * (report["results"][n].get("train", {}).get("wait_share") or 0.0) for n in names]
    bars = ax2.bar(x, wait, color="#c44e52")
    ax2.bar_label(bars, labels=[f"{w:.0f}%" for w in wait], padding=2, fontsize=7)
    ax2.set_xticks(x, names)
    ax2.set_ylabel("% of step time")
    ax2.set_ylim(0, max(5.0, 1.3 * max(wait, default=0.0)))
    ax2.set_title("waiting for data")
    machine = report["machine"]
    gpu = machine["gpu"]["name"] if machine.get("gpu") else "no GPU"
    title = (
        f"gpupipe.bench: {machine['cpu_cores_usable']} CPU cores, {gpu}; batch {report['settings']['batch_size']}, "
        f"{report['settings']['image_size']} px, AMP {report['settings']['amp']}, "
        f"{report['settings'].get('augment', 'standard')} augmentation"
    )
    if report.get("reliability"):
        title += "\n(figures may not be reliable: see the warnings)"
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
