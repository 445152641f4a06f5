"""The bench's output: machine description, terminal table, JSON and PNG chart."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
from pathlib import Path
from typing import Dict, List, Optional

import torch


def machine_info(device: torch.device) -> Dict:
    """CPU, memory, GPU and library versions of this machine."""
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
        "cpu_cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "gpu": None,
        "versions": {"python": platform.python_version()},
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["gpu"] = {"name": props.name, "memory_gib": round(props.total_memory / 2**30, 1), "cuda": torch.version.cuda}
    for package in ("torch", "torchvision", "nvidia-dali-cuda120", "pillow", "numpy", "nvidia-ml-py"):
        try:
            info["versions"][package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            info["versions"][package] = None
    return info


def hardware_label(machine: Dict) -> str:
    """A short label, e.g. ``cpu-2core`` or ``NVIDIA-H100-80GB-HBM3-16core``."""
    cores = machine["cpu_cores_usable"]
    if machine.get("gpu"):
        return f"{machine['gpu']['name'].replace(' ', '-')}-{cores}core"
    return f"cpu-{cores}core"


def _fmt(value: Optional[float], spec: str = ".0f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def table(report: Dict) -> str:
    """A Markdown table of every backend's figures."""
    rows: List[List[str]] = [[
        "backend", "loader img/s", "x baseline", "train img/s", "x baseline", "data wait", "of ceiling",
        "CPU %", "peak RSS MiB", "GPU util", "verdict",
    ]]
    for name, entry in report["results"].items():
        train = entry.get("train", {})
        res = entry.get("train_resources") or entry.get("loader_resources", {})
        rows.append([
            name,
            _fmt(entry["loader"]["images_per_s"]),
            _fmt(entry["loader"].get("x_baseline"), ".2f", "x"),
            _fmt(train.get("images_per_s"), ".1f"),
            _fmt(train.get("x_baseline"), ".2f", "x"),
            _fmt(None if train.get("wait_share") is None else 100 * train["wait_share"], ".0f", "%"),
            _fmt(None if train.get("fraction_of_ceiling") is None else 100 * train["fraction_of_ceiling"], ".0f", "%"),
            _fmt(res.get("cpu_percent")),
            _fmt(res.get("peak_rss_mib")),
            _fmt(res.get("gpu_util_percent"), ".0f", "%"),
            entry.get("verdict", {}).get("bound", "-"),
        ])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    text = "\n".join(lines)
    if "ceiling" in report:
        text += f"\n\nceiling ({report['settings']['model']}, one batch kept on the device): {report['ceiling']['images_per_s']:.1f} img/s"
    suggestions = [f"- {name}: {e['verdict']['suggestion']}" for name, e in report["results"].items()
                   if e.get("verdict", {}).get("suggestion")]
    if suggestions:
        text += "\n\nsuggestions:\n" + "\n".join(suggestions)
    return text


def write_json(report: Dict, path: Path) -> None:
    path.write_text(json.dumps(report, indent=2) + "\n")


def write_chart(report: Dict, path: Path) -> None:
    """Two panels: throughput (loader alone, training, ceiling) and data-wait share, per backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["results"])
    loader = [report["results"][n]["loader"]["images_per_s"] for n in names]
    train = [report["results"][n].get("train", {}).get("images_per_s", 0.0) for n in names]
    wait = [100 * (report["results"][n].get("train", {}).get("wait_share") or 0.0) for n in names]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [2, 1]})
    x = range(len(names))
    ax1.bar([i - 0.2 for i in x], loader, width=0.4, label="loader alone", color="#4c72b0")
    ax1.bar([i + 0.2 for i in x], train, width=0.4, label=f"training ({report['settings']['model']})", color="#dd8452")
    if "ceiling" in report:
        ax1.axhline(report["ceiling"]["images_per_s"], color="#55a868", linestyle="--", label="ceiling (no loading)")
    ax1.set_xticks(list(x), names)
    ax1.set_ylabel("images / s")
    ax1.set_yscale("log")
    ax1.legend(fontsize=8)
    ax1.set_title("throughput (log scale)")
    ax2.bar(list(x), wait, color="#c44e52")
    ax2.set_xticks(list(x), names)
    ax2.set_ylabel("% of step time")
    ax2.set_ylim(0, 100)
    ax2.set_title("waiting for data")
    machine = report["machine"]
    gpu = machine["gpu"]["name"] if machine.get("gpu") else "no GPU"
    fig.suptitle(
        f"gpupipe.bench: {machine['cpu_cores_usable']} CPU cores, {gpu}; batch {report['settings']['batch_size']}, "
        f"{report['settings']['image_size']} px, AMP {report['settings']['amp']}, "
        f"{report['settings'].get('augment', 'standard')} augmentation",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
