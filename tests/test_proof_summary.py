"""The GPU proof's summary, on the CPU: what it says about the machine when the proof runs in parts."""

import importlib.util
import os
from pathlib import Path

import pytest

SCRIPT = Path(os.environ.get("GPU_PROOF_SCRIPT", Path(__file__).parents[1] / "benchmarks" / "gpu_proof.py"))


@pytest.fixture(scope="module")
def gpu_proof():
    spec = importlib.util.spec_from_file_location("gpu_proof_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def machine_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("Machine:"))


def test_a_proof_run_in_parts_names_its_machine_before_any_bench_step(gpu_proof, tmp_path):
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    first = gpu_proof.Proof(tmp_path, rehearse=True)
    first.write("figures.json", first.figures)  # what a call running only the "epochs" step leaves
    later = gpu_proof.Proof(tmp_path, rehearse=True)  # the next call, reading it back
    for proof in (first, later):
        line = machine_line(gpu_proof.summary(proof))
        assert "None cores" not in line and f", {cores} cores (" in line
        assert line.startswith("Machine: no GPU,") and '"torch": ' in line


def test_a_bench_steps_machine_record_is_read_as_well(gpu_proof, tmp_path):
    recorded = {"gpu": {"name": "NVIDIA H100 80GB HBM3"}, "cpu_cores_usable": 16, "cpu": "AMD EPYC", "versions": {}}
    assert gpu_proof.machine_of_bench({"bench": {"resnet50": {"machine": recorded}}}) == recorded
    proof = gpu_proof.Proof(tmp_path, rehearse=True)
    proof.figures["machine"] = recorded  # as the bench writes it: the GPU is a dict
    assert machine_line(gpu_proof.summary(proof)).startswith("Machine: NVIDIA H100 80GB HBM3, 16 cores (AMD EPYC)")


def test_the_targets_are_the_ones_of_issue_25_and_judged_from_the_figures(gpu_proof):
    """One home for the GPU targets: the proof's TARGETS, judged from the peer comparison and the benches
    (host share: at most; the others: at least)."""
    figures = {
        "peer_compare": {
            "results": {"gpupipe-dali loader alone": {"images_per_s": 19_500.0}},
            "ratios": {"loader alone": {"gpupipe_over_hand": 0.98},
                       "resnet18": {"gpupipe_over_hand": 0.90, "host_share": {"gpupipe-dali": 0.08}}},
        },
        "bench": {
            "resnet50": {"results": {"dali": {"loader": {"images_per_s": 20_000.0},
                                              "train": {"fraction_of_ceiling": 0.96}}}},
            "heavy": {"results": {"dali": {"loader": {"images_per_s": 15_000.0}}}},
        },
    }
    rows = {text: (measured, met) for text, measured, met in gpu_proof.targets(figures)}
    assert [text for text, _ in gpu_proof.TARGETS.values()] == list(rows)
    verdicts = dict(zip(gpu_proof.TARGETS, (met for _, met in rows.values())))
    assert verdicts == {"resnet18_vs_hand": "MISSED", "resnet18_host_share": "met", "loader_vs_hand": "met",
                        "loader_rate": "met", "resnet50_ceiling": "met", "heavy_within_15": "MISSED",
                        "warning_lines": "-", "auto_vs_sweep": "-"}, "the long proof measures neither of #36's two"
    assert all(met == "-" for _, _, met in gpu_proof.targets({})), "nothing measured: nothing judged"
