"""gpupipe's layers and its import graph, read from the source (not hand-drawn): the development page
draws it (``docs/hooks.py``: ``{{ import_graph() }}``) and ``tests/test_layout.py`` checks it.

A module may import from its own layer or a lower one, never a higher one, and no module imports itself
back through others, counting every import in a file (inside functions and under ``TYPE_CHECKING`` too).
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path
from typing import Dict, List, Set, Tuple

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gpupipe"

#: The layers, lowest first: ``(name, what it holds, module patterns)``. A module belongs to the first
#: layer with a pattern that matches its name.
LAYERS: List[Tuple[str, str, List[str]]] = [
    ("foundation", "errors, argument checks, file reading, digests, locks, image headers, environment, progress",
     ["gpupipe._version", "gpupipe.errors", "gpupipe.checks", "gpupipe.fileio",
      "gpupipe.images", "gpupipe.images.*", "gpupipe.progress", "gpupipe.env", "gpupipe.cli", "gpupipe.plan.seeding"]),
    ("targets", "what each target kind is: reading, checking and packing it",
     ["gpupipe.targets", "gpupipe.targets.*"]),
    ("ops", "what each op is, the named presets and the checked pipeline",
     ["gpupipe.ops", "gpupipe.ops.*", "gpupipe.presets", "gpupipe.plan.spec"]),
    ("plan", "every random parameter of a batch, drawn on the host",
     ["gpupipe.plan", "gpupipe.plan.*"]),
    ("format", "the packed-shard format and remote storage",
     ["gpupipe.shards", "gpupipe.shards.*", "gpupipe.remote", "gpupipe.remote.*"]),
    ("sources", "datasets on disk, in packs, in WebDataset tars, local or remote; the scan; rank shares",
     ["gpupipe.sources", "gpupipe.sources.*", "gpupipe.loading.sampling", "gpupipe.loading.draws",
      "gpupipe.loading.agreement", "gpupipe.loading.config", "gpupipe.loading.resplit"]),
    ("backends", "DALI and torchvision lowerings of ops and targets; the batch contract",
     ["gpupipe.backends", "gpupipe.backends.*", "gpupipe.loading.transfer", "gpupipe.loading.mixing",
      "gpupipe.loading.batchsteps",
      "gpupipe.loading.stats", "gpupipe.loading.epochs"]),
    ("loading", "the loader's front end: loader(), Loader, frameworks, the torchvision swap",
     ["gpupipe.loading", "gpupipe.loading.*", "gpupipe.interop", "gpupipe.interop.*", "gpupipe.amp"]),
    ("tools", "the packer, the bench, demo data and the package's exports",
     ["gpupipe.pack", "gpupipe.pack.*", "gpupipe.bench", "gpupipe.bench.*", "gpupipe.demo", "gpupipe.demo.*",
      "gpupipe._compat", "gpupipe", "gpupipe.__main__"]),
]


def modules() -> Dict[str, Tuple[Path, bool]]:
    """``module name -> (file, is a package)`` for every file of ``gpupipe/``."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def imports() -> Dict[str, Set[str]]:
    """``module -> the gpupipe modules it imports``, every import statement of its file counted."""
    known = modules()
    graph: Dict[str, Set[str]] = {}
    for name, (path, package) in known.items():
        here = name.split(".") if package else name.split(".")[:-1]
        targets: Set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                if module.split(".")[0] != "gpupipe":
                    continue
                for alias in node.names:
                    full = f"{module}.{alias.name}"
                    targets.add(full if full in known else module)
            elif isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name.split(".")[0] == "gpupipe")
        graph[name] = {t for t in targets if t in known and t != name}
    return graph


def layer_of(module: str) -> int:
    """The index in ``LAYERS`` of ``module``'s layer (-1: none)."""
    for index, (_, _, patterns) in enumerate(LAYERS):
        if any(fnmatch.fnmatchcase(module, p) for p in patterns):
            return index
    return -1


def upward() -> List[str]:
    """``"a -> b"`` for every import from a lower layer to a higher one."""
    graph = imports()
    return sorted(f"{a} ({LAYERS[layer_of(a)][0]}) -> {b} ({LAYERS[layer_of(b)][0]})"
                  for a, targets in graph.items() for b in targets if layer_of(b) > layer_of(a))


def cycles() -> List[List[str]]:
    """Every set of modules that import each other in a circle (Tarjan's strongly connected components)."""
    graph = imports()
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def diagram() -> str:
    """The layers as a Mermaid flowchart, highest first: each layer its modules' folders, and an arrow
    for each pair of layers with an import between them (counted)."""
    graph = imports()
    counts: Dict[Tuple[int, int], int] = {}
    for a, targets in graph.items():
        for b in targets:
            la, lb = layer_of(a), layer_of(b)
            if la != lb:
                counts[(la, lb)] = counts.get((la, lb), 0) + 1
    lines = ["```mermaid", "flowchart TD"]
    for index in reversed(range(len(LAYERS))):
        name, what, _ = LAYERS[index]
        members = sorted({_unit(m) for m in graph if layer_of(m) == index})
        lines.append(f'    L{index}["<b>{name}</b><br/>{what}<br/><code>{", ".join(members)}</code>"]')
    for (a, b), count in sorted(counts.items(), key=lambda item: (-item[0][0], -item[0][1])):
        lines.append(f"    L{a} -->|{count}| L{b}")
    lines.append("```")
    return "\n".join(lines)


def _unit(module: str) -> str:
    """How the diagram names a module: its folder (``loading/``) or its file (``errors.py``)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "gpupipe/__init__.py"
    path, package = modules()[module]
    if len(parts) == 2:
        return f"{parts[1]}/" if package else f"{parts[1]}.py"
    return f"{parts[1]}/{parts[2]}" + ("/" if package else ".py") if parts[1] in ("loading", "plan", "targets") else f"{parts[1]}/"


if __name__ == "__main__":
    print("upward:", *upward(), sep="\n  ")
    print("cycles:", *cycles(), sep="\n  ")
    print("unplaced:", *[m for m in imports() if layer_of(m) < 0], sep="\n  ")
