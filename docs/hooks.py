"""mkdocs hook: tables and figures generated from the committed benchmark results, so that no
measured figure or ratio in the documentation is typed by hand.

A page writes a call between double braces, on a line of its own for a table or inline for one
figure::

    {{ bench_table("cpu-2core") }}                   the bench's table, from benchmarks/results/cpu-2core/bench.json
    {{ bench_tables() }}                             every benchmarks/results/*/bench.json, one section each
    {{ cpu_compare_table("cpu-2core/cpu_compare.json") }}
    {{ pack_tables("cpu-2core/pack.json") }}
    {{ remote_tables("cpu-2core/remote.json") }}
    {{ startup_table("cpu-2core/startup.json") }}
    {{ scan_table("cpu-2core/scan.json") }}
    {{ chart("cpu-2core") }}                         the bench's chart (bench.png), published with the site
    {{ gpu_results() }}                              every committed GPU proof (results/<gpu>-<date>/quick.json)
    {{ op_table() }}                                 every op, from the op registry (docs/optable.py)
    {{ import_graph() }}                             the layers and their imports (docs/layers.py)
    {{ value("cpu-2core/bench.json", "results.dali-cpu.loader.x_baseline", "{:.2f}x") }}
    {{ ratio("cpu-2core/pack.json", "loading.dali-cpu.shards.images_per_s", "loading.dali-cpu.folder.images_per_s") }}

Paths are relative to ``benchmarks/results/``. A missing file, a missing key or an unknown call
stops the build with an error naming it (a typo never renders as an empty table).

README.md holds one results table, rendered by :func:`readme_block` between two HTML comments;
``python docs/hooks.py --readme`` rewrites it, and ``tests/test_docs.py`` fails while it is stale.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
README = ROOT / "README.md"
CALL = re.compile(r"\{\{\s*(\w+)\((.*?)\)\s*\}\}")
FENCE = re.compile(r"^(```|~~~)")
CODE_SPAN = re.compile(r"(`+[^`]*?`+)")


class ResultsError(Exception):
    """A call in a page that names no results file, key or function."""


def load(relative: str) -> Dict[str, Any]:
    """The JSON object of ``benchmarks/results/<relative>``."""
    path = RESULTS / relative
    if not path.is_file():
        raise ResultsError(f"no results file {path}")
    return json.loads(path.read_text())


def lookup(data: Dict[str, Any], dotted: str, where: str) -> Any:
    """``data["a"]["b"]`` for ``"a.b"``; a key may itself hold dots if no shorter prefix matches."""
    node: Any = data
    parts = dotted.split(".")
    while parts:
        for take in range(1, len(parts) + 1):
            key = ".".join(parts[:take])
            if isinstance(node, dict) and key in node:
                node, parts = node[key], parts[take:]
                break
        else:
            raise ResultsError(f"{where} has no key {dotted!r}")
    return node


def fmt(value: Optional[float], spec: str = ".0f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def spread(runs: Sequence[float], median: float, spec: str = ".0f") -> str:
    """``"median (min-max)"`` of a set of repeats."""
    return f"{median:{spec}} ({min(runs):{spec}}-{max(runs):{spec}})"


def markdown_table(header: List[str], rows: List[List[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def admonition(kind: str, title: str, lines: List[str]) -> str:
    body = "\n".join(f"    - {line}" for line in lines)
    return f'!!! {kind} "{title}"\n\n{body}'


# -- the bench ---------------------------------------------------------------------------------------


def chart(label: str, page: str = "") -> str:
    """The bench's chart of ``<label>``, published with the site as ``results/<label>/bench.png``."""
    if not (RESULTS / label / "bench.png").is_file():
        raise ResultsError(f"no chart {RESULTS / label / 'bench.png'}")
    up = "../" * page.count("/")
    return f"![bench chart, {label}]({up}results/{label}/bench.png)"


def bench_table(label: str, page: str = "") -> str:
    """The table ``python -m gpupipe.bench`` prints, from ``<label>/bench.json``, with its settings,
    its ceiling and the bench's own warnings about the run."""
    report = load(f"{label}/bench.json")
    s, machine = report["settings"], report["machine"]
    gpu = machine.get("gpu") or "no GPU"
    if isinstance(gpu, dict):
        gpu = f"{gpu.get('name', 'a GPU')} ({gpu.get('memory_gib', '?')} GiB)"
    intro = (f"Machine: {machine.get('cpu', '?')}, {machine['cpu_cores']} cores, {gpu}. Model "
             f"`{s['model']}`, batch {s['batch_size']}, {s['image_size']} px, "
             f"`--augment {s.get('augment', 'standard')}`, "
             f"{s['repeats']} repeats, on {report['data']['images']:,} images; the run took "
             f"{report['elapsed_s']:.0f} s. Source: `benchmarks/results/{label}/bench.json`.")
    from gpupipe.bench.report import table_rows  # the table the bench prints, one home

    header, *rows = table_rows(report)
    rows = [[f"`{row[0]}`", *row[1:]] for row in rows]
    parts = [intro, markdown_table(header, rows)]
    ceiling = report.get("ceiling")
    if ceiling:
        parts.append(f"Ceiling (`{s['model']}`, one batch kept on the device): "
                     f"{spread(ceiling['runs'], ceiling['images_per_s'], '.1f')} img/s.")
    if report.get("reliability"):
        parts.append(admonition("warning", "The bench's own warning: these figures may not be reliable",
                                report["reliability"]))
    if (RESULTS / label / "bench.png").is_file():
        parts.append(chart(label, page))
    return "\n\n".join(parts)


def bench_tables(page: str = "") -> str:
    """A section per ``benchmarks/results/<label>/bench.json``, in name order."""
    labels = sorted(p.parent.name for p in RESULTS.glob("*/bench.json"))
    if not labels:
        raise ResultsError(f"no bench.json under {RESULTS}")
    return "\n\n".join(f"### `{label}`\n\n{bench_table(label, page)}" for label in labels)


# -- the other benchmarks ----------------------------------------------------------------------------


def cpu_compare_table(relative: str) -> str:
    """``benchmarks/cpu_compare.py``'s loaders at every batch size it ran: median (min-max) images/s and
    the ratios of medians to the tutorial loader and to hand-written DALI."""
    report = load(relative)
    sizes = list(report["results"])
    names = list(report["results"][sizes[0]]["loaders"])
    header = ["loader"]
    for size in sizes:
        header += [f"batch {size}: img/s (min-max)", "x tutorial", "x hand DALI"]
    rows = []
    for name in names:
        row = [f"`{name}`"]
        for size in sizes:
            entry = report["results"][size]["loaders"].get(name)
            if entry is None:
                row += ["-", "-", "-"]
                continue
            row += [spread(entry["runs"], entry["median"]), fmt(entry["x_tutorial"], ".2f", "x"),
                    fmt(entry["x_hand_dali"], ".2f", "x")]
        rows.append(row)
    stats = report["data_stats"]
    busy = {size: report["results"][size].get("discarded_busy_rounds", 0) for size in sizes}
    note = (f"{stats['images']:,} images (mean {stats['mean_width']:.0f}x{stats['mean_height']:.0f} px, "
            f"{stats['mean_kib']:.0f} KiB), {report['cores']} cores, {report['rounds']} rounds of {report['steps']} "
            f"batches; rounds discarded as busy: " + ", ".join(f"batch {k}: {v}" for k, v in busy.items())
            + f". Source: `benchmarks/results/{relative}`.")
    return markdown_table(header, rows) + "\n\n" + note


def pack_tables(relative: str) -> str:
    """``benchmarks/pack_bench.py``: packing throughput, then loading from the folder and from shards."""
    report = load(relative)
    packing = markdown_table(
        ["packing", "images/s", "per core", "copied byte for byte", "MiB in", "MiB out"],
        [[f"`{name}`", fmt(p["images_per_s"]), fmt(p["images_per_s_per_core"]), f"{p['copied']:,} of {p['packed']:,}",
          fmt(p["mib_in"], ".1f"), fmt(p["mib_out"], ".1f")] for name, p in report["packing"].items()])
    kinds = list(next(iter(report["loading"].values())))
    loading = markdown_table(
        ["backend"] + [f"`{k}` img/s (min-max)" for k in kinds] + [f"`{k}` x folder" for k in kinds[1:]],
        [[f"`{backend}`"] + [spread(e[k]["runs"], e[k]["images_per_s"]) for k in kinds]
         + [fmt(e[k]["x_folder"], ".2f", "x") for k in kinds[1:]] for backend, e in report["loading"].items()])
    s = report["settings"]
    note = (f"{report['cores']} cores; loader alone, `{s['pipeline']}` preset, batch {s['batch_size']}, "
            f"{s['image_size']} px, medians of {s['repeats']} repeats. Source: `benchmarks/results/{relative}`.")
    return "\n\n".join([packing, loading, note])


def remote_tables(relative: str) -> str:
    """``benchmarks/remote_bench.py``: one epoch per place the pack lives, and packing across ranks."""
    report = load(relative)
    backends = list(report["loading"])
    places = list(report["loading"][backends[0]])
    header = ["pack read from"]
    for backend in backends:
        header += [f"`{backend}` img/s (min-max)", "x local"]
    rows = []
    for place in places:
        row = [place]
        for backend in backends:
            entry = report["loading"][backend][place]
            row += [spread(entry["runs"], entry["images_per_s"]), fmt(entry["x_local"], ".2f", "x")]
        rows.append(row)
    loading = markdown_table(header, rows)
    packing = markdown_table(
        ["packing", "images/s, packing alone", "images/s, wall time", "wall s (median)"],
        [[name, fmt(p["images_per_s_packing"]), fmt(p["images_per_s_wall"]),
          fmt(sorted(r["wall_s"] for r in p["runs"])[len(p["runs"]) // 2], ".1f")]
         for name, p in report["packing"].items()])
    s = report["settings"]
    note = (f"{report['machine']}; {report['images']:,} images packed into {report['shards']} shards "
            f"({report['pack_mib']} MiB); the limited link: {report['limited_link_mib_per_s']:.0f} MiB/s per "
            f"connection. Each figure: {s['measure']}, `{s['pipeline']}` preset, batch {s['batch_size']}, "
            f"medians of {s['repeats']} repeats. Source: `benchmarks/results/{relative}`.")
    return "\n\n".join([loading, packing, note])


def startup_table(relative: str) -> str:
    """``benchmarks/startup_bench.py``: listing, scanning and list parsing at ImageNet scale."""
    report = load(relative)
    rows = [[f"{r['files']:,}", fmt(r["torchvision_imagefolder_s"], ".2f", " s"),
             fmt(r["gpupipe_listing_s"], ".2f", " s"),
             fmt(r["loader_cold_s"], ".1f", " s"), fmt(r["loader_warm_s"], ".2f", " s"),
             fmt(r["warm_vs_imagefolder"], ".2f", "x"), fmt(r["first_batch_s"], ".2f", " s"),
             fmt(r["file_list_parse_s"], ".2f", " s")] for r in report["results"]]
    header = ["files", "torchvision `ImageFolder`", "gpupipe listing", "loader build, cold scan",
              "loader build, warm scan", "warm scan x `ImageFolder`", "first batch", "list of that many lines parsed"]
    return markdown_table(header, rows) + f"\n\n{report['cores']} cores. Source: `benchmarks/results/{relative}`."


def scan_table(relative: str) -> str:
    """``benchmarks/scan_bench.py``: seconds per 100,000 files, first scan and cached."""
    report = load(relative)
    rows = [[name, fmt(seconds, ".2f", " s")] for name, seconds in report["seconds_per_100k"].items()]
    return (markdown_table(["scan", "per 100,000 files"], rows)
            + f"\n\n{report['files']:,} files of {report['file_kib']:.0f} KiB. "
            f"Source: `benchmarks/results/{relative}`.")


def value(relative: str, dotted: str, spec: str = "{}") -> str:
    """One figure of a results file, formatted with ``spec`` (``"{:.2f}x"``)."""
    return spec.format(lookup(load(relative), dotted, f"benchmarks/results/{relative}"))


def ratio(relative: str, numerator: str, denominator: str, spec: str = "{:.2f}x") -> str:
    """The ratio of two figures of one results file."""
    data = load(relative)
    where = f"benchmarks/results/{relative}"
    return spec.format(lookup(data, numerator, where) / lookup(data, denominator, where))


# -- the README's one table --------------------------------------------------------------------------

#: The bench run README.md shows, and the columns of the bench's table it keeps, in order.
README_LABEL = "cpu-2core"
README_COLUMNS = ("backend", "loader img/s (min-max)", "x baseline", "train img/s (min-max)", "x baseline",
                  "of ceiling", "verdict")
README_START = ("<!-- The results table below is generated from benchmarks/results/{label}/bench.json: "
                "do not edit it; `python docs/hooks.py --readme` rewrites it. -->")
README_END = "<!-- End of the generated results table. -->"


def readme_table(label: str = README_LABEL) -> str:
    """README.md's results table: the bench's own table for ``<label>``, fewer columns, a caption
    saying where it ran and the bench's warnings about the run.

    Raises:
        ResultsError: the results file, or one of :data:`README_COLUMNS`, is missing.
    """
    from gpupipe.bench.report import table_rows  # the table the bench prints, one home

    report = load(f"{label}/bench.json")
    header, *rows = table_rows(report)
    keep, start = [], 0
    for name in README_COLUMNS:  # "x baseline" appears twice: take the next one to the right
        if name not in header[start:]:
            raise ResultsError(f"the bench's table has no column {name!r} after {header[:start]}")
        start = header.index(name, start) + 1
        keep.append(start - 1)
    s, machine = report["settings"], report["machine"]
    gpu = machine.get("gpu")
    where = f"{gpu['name']}, " if isinstance(gpu, dict) else "no GPU, "
    caption = (f"`python -m gpupipe.bench` on {machine['cpu_cores']} CPU cores ({where}{machine.get('cpu', '?')}): "
               f"`{s['model']}` in {report.get('amp', {}).get('dtype', s.get('amp', '?'))}, batch {s['batch_size']}, "
               f"{s['image_size']} px, {s['repeats']} repeats; "
               f"median (min-max) of the repeats, source `benchmarks/results/{label}/bench.json`.")
    table = markdown_table([header[i] for i in keep], [[f"`{row[0]}`"] + [row[i] for i in keep[1:]] for row in rows])
    parts = [caption, table]
    if report.get("reliability"):
        parts.append("The bench's own warning about this run: " + "; ".join(report["reliability"]) + ".")
    return "\n\n".join(parts)


def readme_block(label: str = README_LABEL) -> str:
    """:func:`readme_table` between the two comments that mark it in README.md."""
    return f"{README_START.format(label=label)}\n\n{readme_table(label)}\n\n{README_END}"


def update_readme(path: Path = README, label: str = README_LABEL) -> bool:
    """Rewrites the generated table in ``path`` (between its two comments); returns whether it changed."""
    text = path.read_text()
    start, end = text.find(README_START.split("{label}")[0]), text.find(README_END)
    if start < 0 or end < start:
        raise ResultsError(f"{path} has no generated results table (between {README_START!r} and {README_END!r})")
    new = text[:start] + readme_block(label) + text[end + len(README_END):]
    if new != text:
        path.write_text(new)
    return new != text


def _script(path: str) -> Any:
    """A helper file of the repository (``benchmarks/gpu_results.py``, ``docs/optable.py``, ...) loaded by
    path, as its own module (each imports nothing heavy)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _gpu_results() -> Any:
    """``benchmarks/gpu_results.py`` (the GPU proof's targets and tables)."""
    return _script("benchmarks/gpu_results.py")


def proof_targets() -> str:
    """The GPU proof's targets as a list, from ``TARGETS`` in ``benchmarks/gpu_results.py`` (their one home)."""
    return "\n".join(f"- {text}" for text, _ in _gpu_results().TARGETS.values())


def gpu_results(results: Optional[Path] = None) -> str:
    """Every committed GPU proof (``benchmarks/results/<gpu>-<date>/quick.json``): its machine, targets, peer
    comparison, ``hw_decoder_load`` sweep and per-op costs; a sentence where none is committed yet."""
    return _gpu_results().sections(RESULTS if results is None else results)


def op_table() -> str:
    """The table of every op gpupipe ships, derived from the op registry (``docs/optable.py``)."""
    return _script("docs/optable.py").table()


def import_graph() -> str:
    """gpupipe's layers and the imports between them, read from the source (``docs/layers.py``)."""
    return _script("docs/layers.py").diagram()


CALLS: Dict[str, Callable[..., str]] = {f.__name__: f for f in (
    bench_table, bench_tables, cpu_compare_table, pack_tables, remote_tables, startup_table, scan_table, value, ratio,
    chart, proof_targets, gpu_results, op_table, import_graph)}


def render(markdown: str, page: str = "") -> str:
    """``markdown`` with every ``{{ call(...) }}`` outside code (fenced blocks, inline spans) replaced
    by what it generates."""
    out, fenced = [], False
    for line in markdown.split("\n"):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
        if fenced:
            out.append(line)
            continue
        pieces = CODE_SPAN.split(line)  # odd pieces are inline code, left as written
        out.append("".join(p if i % 2 else CALL.sub(lambda m: _call(m, page), p) for i, p in enumerate(pieces)))
    return "\n".join(out)


def _call(match: "re.Match[str]", page: str) -> str:
    name, raw = match.group(1), match.group(2)
    if name not in CALLS:
        raise ResultsError(f"{page}: unknown call {name}() in {match.group(0)!r}")
    try:
        args = ast.literal_eval(f"({raw},)") if raw.strip() else ()
    except (ValueError, SyntaxError) as err:
        raise ResultsError(f"{page}: arguments of {match.group(0)!r} are not literals: {err}") from None
    function = CALLS[name]
    if "page" in inspect.signature(function).parameters:
        return function(*args, page=page)
    return function(*args)


def on_files(files, config):
    """Publishes every ``benchmarks/results/<label>/bench.png`` as ``results/<label>/bench.png``."""
    from mkdocs.structure.files import File

    for path in sorted(RESULTS.glob("*/bench.png")):
        files.append(File.generated(config, f"results/{path.parent.name}/bench.png", abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 -- mkdocs' hook signature
    return render(markdown, page.file.src_path)


def main(argv: List[str]) -> int:
    """``python docs/hooks.py --readme``: rewrites README.md's results table from the committed JSON."""
    if argv != ["--readme"]:
        print("usage: python docs/hooks.py --readme   (rewrites README.md's results table)", file=sys.stderr)
        return 2
    sys.path.append(str(ROOT))  # gpupipe, where it is not installed
    print(f"README.md: results table {'rewritten' if update_readme() else 'already current'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
