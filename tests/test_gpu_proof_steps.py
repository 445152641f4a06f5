"""Steps of the full GPU proof (benchmarks/gpu_proof.py) run in this process, on the CPU: what a step changes
in the process (an environment switch) is put back when it ends, also when it fails, so a later step runs as
the proof meant it to."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_proof  # noqa: E402

SWITCH = "GPUPIPE_NO_KEEPALIVE"


@pytest.mark.parametrize("before", [None, "0"], ids=["unset", "set"])
@pytest.mark.parametrize("fails", [False, True], ids=["passes", "raises"])
def test_the_stream_safety_step_puts_the_keep_alive_switch_back(tmp_path, monkeypatch, before, fails):
    # Before: the step set GPUPIPE_NO_KEEPALIVE by hand and popped it at its end: a failing pass left it "1", so
    # every later step of the same process ran without the keep-alive; one set before the step was lost.
    if before is None:
        monkeypatch.delenv(SWITCH, raising=False)
    else:
        monkeypatch.setenv(SWITCH, before)
    proof = gpu_proof.Proof(tmp_path, rehearse=True)
    seen = []

    def loader(**kwargs):
        """The step's loader (reference pass, with the keep-alive, without it), each noting the switch it saw."""
        seen.append(os.environ.get(SWITCH))
        if fails and len(seen) == 3:
            raise RuntimeError("the loader without the keep-alive failed")
        return [(torch.full((2, 3, 4, 4), float(k)), torch.zeros(2, dtype=torch.int64)) for k in range(3)]

    monkeypatch.setattr(proof, "loader", loader)
    proof.step("stream_safety", proof.stream_safety)
    assert seen == [before, "0", "1"]
    assert os.environ.get(SWITCH) == before
    if fails:
        assert proof.figures["failures"] == {
            "stream_safety": "stream_safety: RuntimeError: the loader without the keep-alive failed"}
    else:
        assert proof.figures["failures"] == {}
        same = {"batches": 3, "differing_batches": 0}
        assert proof.figures["stream_safety"] == {"with_keep_alive": same, "without_keep_alive": same}


def test_the_quick_proofs_tests_step_runs_the_unseen_tests_then_the_seen(tmp_path, monkeypatch):
    """The quick proof's ``tests`` step over a small tree of ``cuda`` tests, one of which a committed GPU run passed:
    the first pass runs the other two, the second pass that one, each with its own log and counts."""
    import gpu_quick
    import gpu_tests_seen

    root = tmp_path / "root"
    (root / "benchmarks").mkdir(parents=True)
    for name in ("gpu_tests_seen.py", "gpu_results.py"):  # the plugin the step loads, from the tree's benchmarks/
        (root / "benchmarks" / name).write_text((ROOT / "benchmarks" / name).read_text())
    (root / "pytest.ini").write_text("[pytest]\nmarkers =\n    cuda: needs a GPU\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_a.py").write_text(
        "import pytest\n\npytestmark = pytest.mark.cuda\n\n\ndef test_seen():\n    pass\n\n\n"
        "def test_unseen():\n    pass\n\n\ndef test_also_unseen():\n    pass\n")
    (root / "tests" / "test_b.py").write_text("def test_not_cuda():\n    pass\n")
    committed = tmp_path / "results" / "h100-2026-11-27"
    committed.mkdir(parents=True)
    (committed / "quick.json").write_text('{"rehearsal": false}')
    (committed / "tests.log").write_text("tests/test_a.py::test_seen PASSED\n")
    monkeypatch.setattr(gpu_quick, "ROOT", root)
    passed = gpu_tests_seen.passed_on_a_gpu(tmp_path / "results")  # what the step asks, of these results
    monkeypatch.setattr(gpu_tests_seen, "passed_on_a_gpu", lambda: passed)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # serial: no pytest-xdist workers on a small CPU
    out = tmp_path / "out"
    out.mkdir()
    quick = gpu_quick.Quick(out, rehearse=False, budget=600, pack=None, started=0.0)
    quick.tests(300)
    figures = quick.figures["tests"]
    assert (figures["exit"], figures["parallel"], figures["passed_before"]) == (0, False, 1)
    assert figures["outcomes"] == {"passed": 3, "failed": 0, "error": 0, "skipped": 0}
    first, second = figures["summary"].split("; ")
    assert first.startswith("2 passed, 2 deselected") and second.startswith("1 passed, 3 deselected")
    ran = {name: {line.split(" ")[0] for line in (out / f"{name}.log").read_text().splitlines() if " PASSED" in line}
           for name in ("tests", "tests-seen")}
    assert ran == {"tests": {"tests/test_a.py::test_unseen", "tests/test_a.py::test_also_unseen"},
                   "tests-seen": {"tests/test_a.py::test_seen"}}
    assert (out / "tests.xml").is_file() and (out / "tests-seen.xml").is_file()


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie left for a parent to reap does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_step_process_goes_with_a_proof_stopped_by_ctrl_c(tmp_path):
    # A step runs in its own session (so that its cap can kill the whole group), which Ctrl-C at the terminal does
    # not reach. Before: a proof stopped by Ctrl-C left its step running on (a pytest run of minutes on the GPU).
    pid_file = tmp_path / "pid"
    child = f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(120)\n"
    runner = (f"import sys\nfrom pathlib import Path\nsys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
              f"import gpu_quick\ngpu_quick.run_logged([sys.executable, '-c', {child!r}], "
              f"Path({str(tmp_path / 'step.log')!r}), 120)\n")
    proc = subprocess.Popen([sys.executable, "-c", runner], stderr=subprocess.PIPE, text=True)
    pid = None
    try:
        for _ in range(600):
            if pid_file.is_file() and pid_file.read_text():
                pid = int(pid_file.read_text())
                break
            time.sleep(0.1)
        assert pid is not None, "the step never started"
        proc.send_signal(signal.SIGINT)  # Ctrl-C reaches the proof's own process group only
        _, stderr = proc.communicate(timeout=60)
        assert "KeyboardInterrupt" in stderr
        for _ in range(100):
            if not _alive(pid):
                break
            time.sleep(0.1)
        assert not _alive(pid), "the step's process outlived the proof"
    finally:
        proc.kill()
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGKILL)
