"""The GPU proof's targets and its results as Markdown: one home for both, used by the proof scripts
(``summary.md``) and by the documentation (``docs/hooks.py`` renders every committed
``benchmarks/results/<gpu>-<date>/quick.json``). Imports nothing heavy (no torch, no DALI).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional, Tuple

#: The committed runs, one folder each (``benchmarks/results/<gpu>-<date>/``).
RESULTS = Path(__file__).resolve().parent / "results"
#: Issue #25's and #36's targets (one H100 or H200, 16 cores): ``key: (what, bound)``. A key in
#: :data:`AT_MOST` is met at or under its bound, every other at or over it. The documentation lists
#: them from here (docs/hooks.py).
TARGETS = {
    "resnet18_vs_hand": ("ResNet-18 end to end >= 0.95x the hand-written DALI pipeline", 0.95),
    "resnet18_host_share": ("host time inside next() <= 10 % of the ResNet-18 epoch", 0.10),
    "loader_vs_hand": ("dali loader alone >= 0.97x the hand-written DALI pipeline", 0.97),
    "loader_rate": ("dali loader alone >= 19,000 images/s at 224 px", 19_000),
    "resnet50_ceiling": ("ResNet-50 AMP end to end >= 95 % of the model-only ceiling", 0.95),
    "heavy_within_15": ("heavy augmentation within 15 % of the standard preset (dali loader alone)", 0.85),
    "warning_lines": ("no DALI or nvImageCodec warning line on stderr in a gpupipe run", 0),
    "auto_vs_sweep": ('hw_decoder_load="auto" within 5 % of the best fixed share of a sweep', 0.95),
}
AT_MOST = ("resnet18_host_share", "warning_lines")
#: How each figure is shown.
FORMS = {"resnet18_vs_hand": "{:.2f}x", "resnet18_host_share": "{:.0%}", "loader_vs_hand": "{:.2f}x",
         "loader_rate": "{:,.0f} img/s", "resnet50_ceiling": "{:.0%} of the ceiling",
         "heavy_within_15": "{:.0%} of standard", "warning_lines": "{:d} lines", "auto_vs_sweep": "{:.2f}x the best"}


def judge(measured: Dict[str, Optional[float]]) -> List[List[str]]:
    """``[target, measured, met]`` rows for :data:`TARGETS`, in order; ``-`` where nothing was measured."""
    rows = []
    for key, (text, bound) in TARGETS.items():
        value = measured.get(key)
        if value is None:
            rows.append([text, "-", "-"])
            continue
        met = value <= bound if key in AT_MOST else value >= bound
        rows.append([text, FORMS[key].format(value), "met" if met else "MISSED"])
    return rows


def quick_measured(figures: Dict) -> Dict[str, Optional[float]]:
    """The targets' figures from a quick proof's ``quick.json`` (``benchmarks/gpu_quick.py``)."""
    dali = "dali-cpu" if figures.get("rehearsal") else "dali"
    peer = figures.get("peer", {})
    ratios = peer.get("ratios", {})
    alone = ratios.get("loader alone", {})
    r18 = _model(ratios, "resnet18")
    r50 = _model(figures.get("resnet50", {}).get("ratios", {}), "resnet50")
    host, sweep = figures.get("host", {}), figures.get("hw_decoder_load", {})
    return {
        "resnet18_vs_hand": r18.get("gpupipe_over_hand"),
        "resnet18_host_share": r18.get("host_share", {}).get(f"gpupipe-{dali}"),
        "loader_vs_hand": alone.get("gpupipe_over_hand"),
        "loader_rate": peer.get("results", {}).get(f"gpupipe-{dali} loader alone", {}).get("images_per_s"),
        "resnet50_ceiling": r50.get("of_ceiling", {}).get(f"gpupipe-{dali}"),
        "heavy_within_15": figures.get("op_costs", {}).get("heavy_over_standard"),
        "warning_lines": host.get("warning_lines"),
        "auto_vs_sweep": sweep.get("auto_over_best"),
    }


def _model(ratios: Dict, name: str) -> Dict:
    """The ratios of the loop that trained ``name`` (in a CPU rehearsal, the one small model it trained instead)."""
    return ratios.get(name) or next((v for k, v in ratios.items() if k != "loader alone"), {})


def _table(header: List[str], rows: List[List[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _spread(entry: Dict, key: str = "images_per_s", spec: str = ",.0f") -> str:
    low, high = entry.get(f"{key}_range", [entry[key], entry[key]])
    return f"{entry[key]:{spec}} ({low:{spec}}-{high:{spec}})"


def peer_rows(peer: Dict) -> Tuple[List[str], List[List[str]]]:
    """The peer comparison: per loop and loader, images/s (min-max), host ms per batch and its share of the loop,
    and the share of the loop's wall time spent inside ``next()`` (waiting included)."""
    rows = []
    for key, entry in sorted(peer.get("results", {}).items(), key=lambda kv: (kv[0].startswith("ceiling"), kv[0])):
        if key.startswith("ceiling "):
            rows.append([f"ceiling ({key[len('ceiling '):]})", _spread(entry), "-", "-", "-"])
            continue
        wait = f"{entry['wait_share']:.1%}" if "wait_share" in entry else "-"
        rows.append([key, _spread(entry), f"{entry['host_ms_per_batch']:.2f}", f"{entry['host_share']:.1%}", wait])
    header = ["loader, loop", "images/s (min-max)", "host ms per batch in next()", "host share of the loop",
              "wall time in next()"]
    return header, rows


def section(folder: Path, title_level: str = "###") -> str:
    """Every table of one committed quick proof (``folder/quick.json``), with its machine and versions."""
    figures = json.loads((Path(folder) / "quick.json").read_text())
    machine = figures.get("machine", {})
    versions = ", ".join(f"{k} {v}" for k, v in machine.get("versions", {}).items() if v)
    parts = [f"{title_level} `{Path(folder).name}`" + (" (CPU rehearsal, not a GPU result)"
                                                        if figures.get("rehearsal") else ""),
             f"Machine: {machine.get('gpu') or 'no GPU'}, {machine.get('cpu_cores_usable', '?')} cores "
             f"({machine.get('cpu', '?')}); {versions}; DALI build `{machine.get('dali_build', '?')}`. "
             f"Source: `benchmarks/results/{Path(folder).name}/`.",
             _table(["target", "measured", ""], judge(quick_measured(figures)))]
    peer = figures.get("peer", {})
    if peer.get("results"):
        header, rows = peer_rows(peer)
        data = figures.get("data", {})
        parts += [f"Peer comparison on {data.get('images', '?'):,} images ({data.get('unique', '?'):,} generated, "
                  f"the rest hard links; mean {data.get('mean_width', 0):.0f}x{data.get('mean_height', 0):.0f} px), "
                  f"batch {peer.get('settings', {}).get('batch_size', '?')}, "
                  f"{peer.get('rounds_done', '?')} rounds:", _table(header, rows)]
    sweep = figures.get("hw_decoder_load", {}).get("images_per_s")
    if sweep:
        chosen = figures["hw_decoder_load"].get("auto_chose")
        parts += [f"`hw_decoder_load`, loader alone (auto chose {chosen}):",
                  _table(["hw_decoder_load", "images/s"], [[k, f"{v:,.0f}"] for k, v in sweep.items()])]
    resnet50 = figures.get("resnet50", {})
    if resnet50.get("results"):
        header, rows = peer_rows(resnet50)
        rounds = resnet50.get("rounds_done", "?")
        parts += [f"ResNet-50 end to end (bf16, channels_last, batch 256), {rounds} round{'s' if rounds != 1 else ''}:",
                  _table(header, rows)]
    costs = figures.get("op_costs", {}).get("rows")
    if costs:
        costs = costs + [row for key in ("form_rows", "peer_rows", "torch_rows") for row in figures["op_costs"].get(key, [])]
        torch_share = figures["op_costs"].get("heavy_over_standard_torch")
        parts += ["Heavy setting, milliseconds per batch each op adds (loader alone; `[cpu form]` rows, where "
                  "measured: the op lowered as on `dali-cpu`; `hand:` rows: the same ops in DALI's own form; "
                  "`[torch form]` rows: `GPUPIPE_DALI_FORM=torch`, the policy and erasing as batched torch ops on "
                  "DALI's uint8 batch" + (f", the whole heavy setting at {torch_share:.0%} of standard" if torch_share
                                          else "") + "):",
                  _table(["op", "ms per batch", "prefix ms per batch"],
                         [[r["op"], f"{r['op_ms_per_batch']:.2f}", f"{r['prefix_ms_per_batch']:.2f}"] for r in costs])]
    tests = figures.get("tests", {})
    outcomes = ", ".join(f"{v} {k}" for k, v in tests.get("outcomes", {}).items() if v)
    lines = [f"cuda tests: {tests.get('summary', '-')}" + (f" ({outcomes})" if outcomes else ""),
             f"warning lines of a gpupipe run: {figures.get('host', {}).get('warning_lines', '-')}",
             "seconds per step: " + ", ".join(f"{k} {v}" for k, v in figures.get("seconds", {}).items())]
    lines += [f"failed or cut: {v}" for v in {**figures.get("failures", {}), **figures.get("skipped", {})}.values()]
    parts.append("\n".join(f"- {line}" for line in lines))
    return "\n\n".join(parts)


def is_gpu_run(folder: Path) -> bool:
    """Whether ``folder`` holds a GPU run, not a CPU rehearsal: its quick proof's ``quick.json`` (or, without
    one, the full proof's ``summary.md``) is not a rehearsal's. A folder with neither holds no proof run."""
    quick, summary = Path(folder) / "quick.json", Path(folder) / "summary.md"
    if quick.is_file():
        return not json.loads(quick.read_text()).get("rehearsal")
    return summary.is_file() and "rehearsal" not in summary.read_text()


def sections(results: Path) -> str:
    """:func:`section` for every ``results/*/quick.json`` that is a GPU result, newest label last; a
    sentence where there is none yet."""
    folders = sorted(p.parent for p in Path(results).glob("*/quick.json") if is_gpu_run(p.parent))
    if not folders:
        return ("No GPU result is committed yet: `benchmarks/NOTES.md` (\"From a bare GPU machine to committed "
                "results\") says how the next GPU session makes one.")
    return "\n\n".join(section(f) for f in folders)


__all__ = ["RESULTS", "TARGETS", "AT_MOST", "is_gpu_run", "judge", "quick_measured", "section", "sections"]


def main(argv: Optional[List[str]] = None) -> int:
    """Print the Markdown of every committed GPU result (what the documentation shows)."""
    import argparse

    parser = argparse.ArgumentParser(description="The committed GPU results as Markdown, with their targets.")
    parser.add_argument("results", nargs="?", type=Path, default=RESULTS,
                        help="the results folder (default: benchmarks/results)")
    print(sections(parser.parse_args(argv).results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
