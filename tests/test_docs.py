"""The documentation: every results call in docs/ renders from the committed JSON, a bad call stops
the build, no page types a measured ratio by hand, README.md's one results table is the committed
JSON's, the API pages name public objects only, and no paragraph is written on two pages."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

import gpupipe

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
#: A ratio such as "1.38x"; a target ("needs >= 0.97x") is not a measurement.
RATIO = re.compile(r"(?<![<>]= )\b\d+\.\d+x\b")


def load_hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = load_hooks()


def without_code(markdown: str) -> str:
    """The page without fenced blocks and inline code spans (where calls are shown, not made)."""
    markdown = re.sub(r"^(```|~~~).*?^\1", "", markdown, flags=re.S | re.M)
    return hooks.CODE_SPAN.sub("", markdown)


#: The pages issue #28 asks for, each the one home of its subject.
REQUIRED = {"index.md", "loader.md", "pipelines.md", "targets.md", "sources.md", "packing.md", "remote.md", "backends.md",
            "ddp.md", "bad-data.md", "bench.md", "cpu-gpu.md", "changelog.md", "development.md", "api/loader.md"}


def test_the_pages_exist_and_use_the_generated_tables():
    names = {p.relative_to(DOCS).as_posix() for p in PAGES}
    assert REQUIRED <= names, REQUIRED - names
    calls = [m.group(1) for p in PAGES for m in hooks.CALL.finditer(without_code(p.read_text()))]
    assert {"bench_tables", "cpu_compare_table", "pack_tables", "remote_tables", "startup_table", "scan_table",
            "value", "ratio"} <= set(calls)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_every_page_renders_and_types_no_measured_ratio(page):
    text = page.read_text()
    rendered = hooks.render(text, page.relative_to(DOCS).as_posix())
    assert not hooks.CALL.search(without_code(rendered)), "every call was replaced"
    typed = RATIO.findall(without_code(hooks.CALL.sub("", text)))
    assert not typed, f"{page.name}: ratios typed by hand (use value() or ratio() from docs/hooks.py): {typed}"


def test_a_bench_table_is_the_json_it_reads(tmp_path, monkeypatch):
    report = {
        "machine": {"cpu": "Test CPU", "cpu_cores": 4, "gpu": {"name": "Test GPU", "memory_gib": 80.0}},
        "settings": {"model": "resnet50", "batch_size": 256, "image_size": 224, "repeats": 3, "augment": "standard"},
        "data": {"images": 1000},
        "elapsed_s": 61.0,
        "results": {
            "baseline": {"loader": {"images_per_s": 100.0, "min": 90.0, "max": 110.0, "runs": [90.0, 100.0, 110.0],
                                    "x_baseline": 1.0}},
            "dali": {"loader": {"images_per_s": 250.0, "min": 240.0, "max": 260.0, "runs": [240.0, 250.0, 260.0],
                                "x_baseline": 2.5},
                     "verdict": {"bound": "compute-bound"}},
        },
        "reliability": ["the machine was busy"],
    }
    (tmp_path / "gpu-x").mkdir()
    (tmp_path / "gpu-x" / "bench.json").write_text(__import__("json").dumps(report))
    monkeypatch.setattr(hooks, "RESULTS", tmp_path)
    table = hooks.render('{{ bench_tables() }}', "bench.md")
    assert "### `gpu-x`" in table and "Test GPU (80.0 GiB)" in table
    assert "| `dali` | 250 (240-260) | 2.50x |" in table and "compute-bound" in table
    assert '!!! warning' in table and "the machine was busy" in table
    assert hooks.render('{{ value("gpu-x/bench.json", "results.dali.loader.x_baseline", "{:.1f}x") }}') == "2.5x"
    assert hooks.render('{{ ratio("gpu-x/bench.json", "results.dali.loader.images_per_s", '
                        '"results.baseline.loader.images_per_s") }}') == "2.50x"


@pytest.mark.parametrize("call, message", [
    ('{{ value("missing/bench.json", "a") }}', "no results file"),
    ('{{ value("cpu-2core/bench.json", "results.nothing.here") }}', "has no key 'results.nothing.here'"),
    ('{{ tabel("cpu-2core") }}', "unknown call tabel()"),
    ('{{ bench_table(cpu) }}', "are not literals"),
])
def test_a_bad_call_stops_the_build_naming_it(call, message):
    with pytest.raises(hooks.ResultsError, match=re.escape(message)):
        hooks.render(f"text {call} text", "page.md")


def test_calls_in_code_are_shown_not_run():
    shown = 'run `{{ tabel() }}` or\n```\n{{ tabel() }}\n```\n'
    assert hooks.render(shown) == shown


# -- README.md --------------------------------------------------------------------------------------

README = ROOT / "README.md"
REGENERATE = "python docs/hooks.py --readme"


def readme_table_in(text: str) -> str:
    start = text.index(hooks.README_START.format(label=hooks.README_LABEL))
    return text[start:text.index(hooks.README_END, start) + len(hooks.README_END)]


def test_the_readme_results_table_is_the_committed_json():
    shown = readme_table_in(README.read_text())
    assert shown == hooks.readme_block(), f"README.md's results table is stale: run `{REGENERATE}`"
    rows = [line for line in shown.splitlines() if line.startswith("| `")]
    assert len(rows) == len(hooks.load(f"{hooks.README_LABEL}/bench.json")["results"]) >= 2, rows


def test_a_stale_readme_table_is_rewritten_and_a_missing_one_named(tmp_path):
    readme = tmp_path / "README.md"
    stale = hooks.readme_block().replace("1.00x", "9.99x")
    readme.write_text(f"# title\n\n{stale}\n\nafter\n")
    assert hooks.update_readme(readme) is True
    assert readme.read_text() == f"# title\n\n{hooks.readme_block()}\n\nafter\n"
    assert hooks.update_readme(readme) is False
    readme.write_text("# no table here\n")
    with pytest.raises(hooks.ResultsError, match="has no generated results table"):
        hooks.update_readme(readme)


def test_the_readme_is_short_types_no_ratio_and_links_every_guide_page():
    text = README.read_text()
    assert len(text.splitlines()) <= 170
    typed = RATIO.findall(without_code(text.replace(readme_table_in(text), "")))
    assert not typed, f"README.md types measured ratios by hand: {typed}"
    for command in ('pip install -e ".[bench]" && python -m gpupipe.bench', 'pip install -e ".[docs]"', "mkdocs serve",
                    'gpupipe.loader("data/train", "train", batch_size=256)', "[LICENSE](LICENSE)", "Apache-2.0"):
        assert command in text, command
    links = re.findall(r"\]\(([^)#]+?\.md)(?:#[^)]*)?\)", text)
    assert [link for link in links if not (ROOT / link).is_file()] == []
    nav = re.findall(r":\s*([\w/-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.M)
    guide = {f"docs/{page}" for page in nav if not page.startswith("api/")}
    assert len(guide) >= 14 and guide <= set(links), guide - set(links)


# -- API pages and one home per idea ----------------------------------------------------------------

API = re.compile(r"^:::\s+(\S+)\s*$", re.M)
#: Where public objects live: gpupipe itself and its public modules (ops, presets, pack, remote).
PUBLIC = {"gpupipe"} | {f"gpupipe.{name}" for name in gpupipe.__all__
                        if isinstance(getattr(gpupipe, name), type(gpupipe))}


def api_names() -> list:
    """Every ``::: <name>`` of the API pages."""
    return [m.group(1) for page in sorted((DOCS / "api").glob("*.md")) for m in API.finditer(page.read_text())]


def test_the_api_pages_name_public_objects_only():
    names = api_names()
    assert len(names) >= 40, names
    for name in names:
        namespace, _, last = name.rpartition(".")
        assert namespace in PUBLIC, f"{name}: {namespace} is not a public namespace ({sorted(PUBLIC)})"
        assert last in importlib.import_module(namespace).__all__, f"{name}: not in {namespace}.__all__"


def test_the_public_surface_is_the_documented_api():
    """``gpupipe.__all__`` is what the API pages document: each top-level name, each public module
    (documented as a page entry or through the names in it), and the ops (``gpupipe.ops.OP_NAMES``), which are
    also top-level."""
    documented = set()
    for name in api_names():
        parts = name.split(".")[1:]
        documented.add(parts[0])
        if parts[0] == "ops" and len(parts) > 1 and parts[1] in gpupipe.ops.OP_NAMES:
            documented.add(parts[1])
    public = set(gpupipe.__all__) - {"__version__"}
    assert {"loader", "Loader", "ops", "Decode", "pack", "remote"} <= documented
    assert public == documented, {"exported, not documented": public - documented,
                                  "documented, not exported": documented - public}


def paragraphs(page: Path) -> list:
    """The page's prose paragraphs of 80 characters or more, whitespace folded."""
    text = re.sub(r"^(```|~~~).*?^\1", "", page.read_text(), flags=re.S | re.M)
    found = (" ".join(p.split()) for p in re.split(r"\n\s*\n", text))
    return [p for p in found if len(p) >= 80 and not p.startswith(("|", ":::", "{{"))]


def test_no_paragraph_is_written_on_two_pages():
    seen, twice = {}, []
    for page in PAGES:
        for paragraph in paragraphs(page):
            if paragraph in seen and seen[paragraph] != page.name:
                twice.append((seen[paragraph], page.name, paragraph[:80]))
            seen.setdefault(paragraph, page.name)
    assert len(seen) >= 100, len(seen)
    assert twice == [], twice


def test_names_gpupipe_exported_before_are_still_found_with_a_warning():
    with pytest.warns(DeprecationWarning, match=r"gpupipe.IMAGENET_MEAN is deprecated: use gpupipe.ops.IMAGENET_MEAN"):
        assert gpupipe.IMAGENET_MEAN == gpupipe.ops.IMAGENET_MEAN
    with pytest.warns(DeprecationWarning):
        assert gpupipe.OP_TYPES is gpupipe.ops.OP_TYPES
    with pytest.raises(AttributeError, match="module 'gpupipe' has no attribute 'nothing_here'"):
        gpupipe.nothing_here
    assert "IMAGENET_MEAN" not in gpupipe.__all__
