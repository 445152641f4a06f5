"""The documentation's GPU results tables, generated from a committed quick proof
(``benchmarks/results/<gpu>-<date>/quick.json``) by docs/hooks.py through benchmarks/gpu_results.py."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).parents[1]


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = load("docs_hooks_for_gpu_results", ROOT / "docs" / "hooks.py")

FIGURES = {
    "rehearsal": False,
    "machine": {"gpu": "NVIDIA H100 80GB HBM3", "cpu_cores_usable": 16, "cpu": "AMD EPYC 9454",
                "versions": {"torch": "2.11.0", "dali": "2.4.0"}, "dali_build": "nvidia-dali-cuda120 2.4.0",
                "date": "2026-11-27"},
    "data": {"images": 12800, "unique": 6400, "mean_width": 452.0, "mean_height": 401.0},
    "peer": {"settings": {"batch_size": 256}, "rounds_done": 2,
             "results": {"gpupipe-dali loader alone": {"images_per_s": 19500.0,
                                                       "images_per_s_range": [19400.0, 19600.0],
                                                       "host_ms_per_batch": 1.1, "host_share": 0.08,
                                                       "wait_share": 0.5},
                         "hand-dali loader alone": {"images_per_s": 19800.0, "images_per_s_range": [19700.0, 19900.0],
                                                    "host_ms_per_batch": 0.9, "host_share": 0.07},
                         "gpupipe-dali resnet18": {"images_per_s": 8800.0, "images_per_s_range": [8700.0, 8900.0],
                                                   "host_ms_per_batch": 1.2, "host_share": 0.12},
                         "ceiling resnet18": {"images_per_s": 9900.0, "images_per_s_range": [9800.0, 10000.0],
                                              "host_ms_per_batch": 0.0, "host_share": 0.0}},
             "ratios": {"loader alone": {"gpupipe_over_hand": 0.985},
                        "resnet18": {"gpupipe_over_hand": 0.93, "host_share": {"gpupipe-dali": 0.12}}}},
    "host": {"warning_lines": 0},
    "hw_decoder_load": {"images_per_s": {"auto": 19000.0, "0.0": 15000.0, "0.35": 18000.0, "0.65": 19200.0,
                                         "1.0": 19100.0}, "auto_chose": 0.65, "auto_over_best": 0.99},
    "resnet50": {"ratios": {"resnet50": {"of_ceiling": {"gpupipe-dali": 0.97}}},
                 "results": {"hand-dali resnet50": {"images_per_s": 4600.0, "host_ms_per_batch": 0.8,
                                                    "host_share": 0.02, "wait_share": 0.03}}},
    "op_costs": {"heavy_over_standard": 0.8, "rows": [
        {"op": "Decode+RandomResizedCrop", "op_ms_per_batch": 12.0, "prefix_ms_per_batch": 12.0},
        {"op": "HorizontalFlip", "op_ms_per_batch": 0.5, "prefix_ms_per_batch": 12.5}],
        "peer_rows": [{"op": "hand: RandAugment", "op_ms_per_batch": 6.0, "prefix_ms_per_batch": 18.0}]},
    "tests": {"summary": "130 passed in 95.1s", "outcomes": {"passed": 130, "failed": 0}},
    "seconds": {"peer": 88.0}, "failures": {}, "skipped": {"op_costs": "op_costs: not run, 3 s of the budget left"},
}


def test_committed_gpu_results_generate_their_tables(tmp_path, monkeypatch):
    folder = tmp_path / "h100-80gb-hbm3-2026-11-27"
    folder.mkdir()
    (folder / "quick.json").write_text(json.dumps(FIGURES))
    rehearsal = tmp_path / "no-gpu-2026-11-26"  # a CPU rehearsal committed by mistake is not shown
    rehearsal.mkdir()
    (rehearsal / "quick.json").write_text(json.dumps({**FIGURES, "rehearsal": True}))
    monkeypatch.setattr(hooks, "RESULTS", tmp_path)
    text = hooks.render("## GPU\n\n{{ gpu_results() }}\n", "cpu-gpu.md")  # as the page's call renders it
    assert "`h100-80gb-hbm3-2026-11-27`" in text and "no-gpu" not in text
    assert "NVIDIA H100 80GB HBM3, 16 cores (AMD EPYC 9454)" in text and "nvidia-dali-cuda120 2.4.0" in text
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert rows["ResNet-18 end to end >= 0.95x the hand-written DALI pipeline"].endswith("| 0.93x | MISSED |")
    assert rows["host time inside next() <= 10 % of the ResNet-18 epoch"].endswith("| 12% | MISSED |")
    assert rows["dali loader alone >= 0.97x the hand-written DALI pipeline"].endswith("| 0.98x | met |")
    assert rows["dali loader alone >= 19,000 images/s at 224 px"].endswith("| 19,500 img/s | met |")
    assert rows["ResNet-50 AMP end to end >= 95 % of the model-only ceiling"].endswith("| 97% of the ceiling | met |")
    assert rows["no DALI or nvImageCodec warning line on stderr in a gpupipe run"].endswith("| 0 lines | met |")
    assert rows["gpupipe-dali loader alone"] == \
        "| gpupipe-dali loader alone | 19,500 (19,400-19,600) | 1.10 | 8.0% | 50.0% |"
    assert rows["hand-dali loader alone"].endswith("| 0.90 | 7.0% | - |"), "no wait share measured: a dash"
    assert rows["hand-dali resnet50"] == "| hand-dali resnet50 | 4,600 (4,600-4,600) | 0.80 | 2.0% | 3.0% |"
    assert rows["ceiling (resnet18)"].startswith("| ceiling (resnet18) | 9,900 (9,800-10,000) |")
    assert rows["auto"] == "| auto | 19,000 |" and "auto chose 0.65" in text
    assert rows["HorizontalFlip"] == "| HorizontalFlip | 0.50 | 12.50 |"
    assert rows["hand: RandAugment"] == "| hand: RandAugment | 6.00 | 18.00 |"
    assert "- cuda tests: 130 passed in 95.1s (130 passed)" in text and "- failed or cut: op_costs: not run" in text
    assert "12,800 images (6,400 generated" in text


def test_without_a_committed_gpu_result_the_page_says_so(tmp_path):
    assert hooks.gpu_results(tmp_path).startswith("No GPU result is committed yet")
    assert "gpu_results" in hooks.CALLS and "gpu_results()" in (ROOT / "docs" / "cpu-gpu.md").read_text()


def test_one_rule_says_which_committed_folder_is_a_gpu_run(tmp_path):
    """The documentation's tables (``sections``) and the quick proof's order of the cuda tests (``gpu_tests_seen``)
    take the same folders for GPU runs: ``gpu_results.is_gpu_run``, the one rule."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_results
    import gpu_tests_seen

    folders = {
        "h100-2026-11-27": {"quick.json": json.dumps(FIGURES)},
        "quick-rehearsal": {"quick.json": json.dumps({**FIGURES, "rehearsal": True})},
        "proof-h100": {"summary.md": "# GPU proof\n\nMachine: NVIDIA H100\n"},
        "proof-rehearsal": {"summary.md": "# GPU proof (CPU rehearsal: not a GPU result)\n"},
        "cpu-2core": {"bench.json": "{}"},
    }
    for name, files in folders.items():
        (tmp_path / name).mkdir()
        for file, text in files.items():
            (tmp_path / name / file).write_text(text)
        (tmp_path / name / "tests.log").write_text(f"tests/test_x.py::test_{name.replace('-', '_')} PASSED\n")
    assert {name for name in folders if gpu_results.is_gpu_run(tmp_path / name)} == {"h100-2026-11-27", "proof-h100"}
    assert gpu_tests_seen.passed_on_a_gpu(tmp_path) == {"tests/test_x.py::test_h100_2026_11_27",
                                                        "tests/test_x.py::test_proof_h100"}
    text = gpu_results.sections(tmp_path)
    assert "`h100-2026-11-27`" in text and "rehearsal" not in text and "proof-h100" not in text
    assert gpu_tests_seen.RESULTS == gpu_results.RESULTS == ROOT.resolve() / "benchmarks" / "results"
