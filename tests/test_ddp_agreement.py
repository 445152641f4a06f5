"""Issue 35 (14-16): the ranks sharing a loader list the same files with the same settings, or are
refused by name; a loader of one process joins no collective; a stale process is no rank."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpupipe import env
from helpers import flat_folder

WORKER = Path(__file__).with_name("ddp_agreement_worker.py")


def torchrun(cases: tuple, folder: Path, out: Path, timeout: int = 150) -> dict:
    """Runs the worker's ``cases`` in order in one launch of two gloo ranks; a rank that hangs is ended by
    the timeout. Returns each case's records, rank 0's then rank 1's."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER),
           "--case", *cases, "--folder", str(folder), "--out", str(out)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    except subprocess.TimeoutExpired:
        pytest.fail(f"{cases}: the ranks hung for {timeout} s")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return {case: [json.loads((out / f"{case}-rank{r}.json").read_text()) for r in range(2)] for case in cases}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """One launch: a loader of rank 0 alone (rank 1 waits at a barrier), then the disagreeing loaders."""
    tmp = tmp_path_factory.mktemp("agreement")
    return torchrun(("alone", "disagree"), flat_folder(tmp / "folder", 20), tmp)


@pytest.mark.slow
def test_a_loader_of_one_process_joins_no_collective(runs):
    rank0, rank1 = runs["alone"]
    assert rank1 == {}
    assert rank0["len"] == 10 and sorted(rank0["ids"]) == list(range(20)), "rank 0 read everything, alone"


@pytest.fixture(scope="module")
def disagreements(runs):
    return runs["disagree"]


@pytest.mark.slow
@pytest.mark.parametrize("case, field, values", [
    ("batch_size", "batch_size", ("2 on rank 0", "3 on rank 1")),
    ("seed", "seed", ("0 on rank 0", "1 on rank 1")),
    ("drop_last", "drop_last", ("False on rank 0", "True on rank 1")),
    ("even_batches", "even_batches", ("True on rank 0", "False on rank 1")),
    ("shuffle_given_share", "shuffle", ("True on rank 0", "False on rank 1")),
    ("max_pixels", "max_pixels", ("1000000 on rank 0", "1000001 on rank 1")),
    ("listing", "files", ("20 on rank 0", "21 on rank 1")),
])
def test_ranks_that_disagree_are_refused_by_name(disagreements, case, field, values):
    for record in disagreements:
        got = record[case]
        assert got.get("error") == "RanksDisagree", f"{case}: refused on every rank, got {got}"
        assert f"{field} is " in got["message"]
        for value in values:
            assert value in got["message"]


@pytest.mark.slow
def test_ranks_that_agree_share_the_scan_and_the_data(disagreements):
    ids = [record["agreed"]["ids"] for record in disagreements]
    assert [record["agreed"]["len"] for record in disagreements] == [5, 5]
    assert sorted(ids[0] + ids[1]) == list(range(20)), "each sample once over the two ranks"


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_a_stale_process_of_an_earlier_launch_is_no_rank(tmp_path):
    job = {"MASTER_ADDR": "10.9.8.7", "MASTER_PORT": "41236", "WORLD_SIZE": "8"}
    clean = {k: v for k, v in os.environ.items() if k not in env.LOCAL_SIZE_VARS + ("LOCAL_RANK", "RANK")}
    # a stale rank of an earlier launch: its launcher is gone (orphaned), its environment names the job
    pidfile = tmp_path / "stale.pid"
    subprocess.run([sys.executable, "-c",
                    "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
                    "'import time; time.sleep(60)']); open(sys.argv[1], 'w').write(str(p.pid))", str(pidfile)],
                   env={**clean, **job, "LOCAL_RANK": "5"}, check=True)
    stale = int(pidfile.read_text())
    try:
        time.sleep(0.3)
        # this launch: a launcher starts local ranks 0 and 1; rank 0 counts the processes of the job here
        launcher = (
            "import os, subprocess, sys, time\n"
            "env = dict(os.environ)\n"
            "peer = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'], "
            "env={**env, 'LOCAL_RANK': '1'})\n"
            "time.sleep(0.3)\n"
            "code = 'from gpupipe import env; print(env.local_world_size())'\n"
            "out = subprocess.run([sys.executable, '-c', code], env={**env, 'LOCAL_RANK': '0'}, "
            "capture_output=True, text=True)\n"
            "peer.kill()\n"
            "print(out.stdout.strip() or out.stderr)\n"
        )
        proc = subprocess.run([sys.executable, "-c", launcher], env={**clean, **job}, capture_output=True,
                              text=True, timeout=60)
        assert proc.stdout.strip() == "2", f"local ranks 0 and 1 of this launch, not the stale 5: {proc.stdout}"
    finally:
        os.kill(stale, 9)
