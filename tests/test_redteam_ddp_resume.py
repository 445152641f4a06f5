"""Red team: sharding and exact resume under a real torchrun (2 ranks, gloo, CPU), and gpupipe's
``DataLoader`` inside Lightning and Accelerate.

Two torchrun launches of ``redteam_ddp_worker.py`` (a run, then a resume in new processes) serve every
test here, Lightning's included (its DDP takes torchrun's ranks): a launch costs ~10 s of imports on the
2-core VM.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import CPU_BACKEND_NAMES, CPU_BACKENDS, flat_folder
from imagecases import broken_inside_jpeg

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent
WORKER = HERE / "redteam_ddp_worker.py"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
BAD = 5  # the sample of the "bad" folder that fails when decoded


def launch(command, cwd: Path, timeout: int = 400) -> None:
    env = {k: v for k, v in ENV.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                                     "MASTER_ADDR", "MASTER_PORT")}
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]


def torchrun(*args) -> list:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER), *args]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    data = tmp_path_factory.mktemp("redteam_ddp")
    flat_folder(data / "d13", 13)
    flat_folder(data / "d13b", 13, classes=2)  # as many samples, other names
    flat_folder(data / "d7", 7)
    flat_folder(data / "d24", 24)
    bad = flat_folder(data / "bad", 12, classes=1)
    original = bad / "class_0" / f"s{BAD:04d}.png"
    original.unlink()
    broken_inside_jpeg(original.with_suffix(".jpg"), seed=1)
    return data


@pytest.fixture(scope="module")
def launches(data):
    """``(run, resume)``: each rank's record of the two launches, by rank (the Lightning fits of both launches are
    in ``data / "steps"``: :func:`lightning_steps`)."""
    out, steps = data / "out", data / "steps"
    out.mkdir()
    steps.mkdir()
    for phase in ("run", "resume"):
        launch(torchrun("--data", str(data), "--out", str(out), "--phase", phase,
                        "--backends", ",".join(CPU_BACKEND_NAMES), "--lightning", str(steps)), out)
    return tuple([json.loads((out / f"{phase}-rank{r}.json").read_text()) for r in range(2)]
                 for phase in ("run", "resume"))


def per_rank_sizes(n, drop_last, bs):
    share = n // 2 if drop_last else -(-n // 2)
    return share // bs if drop_last else -(-share // bs)


@pytest.mark.parametrize("n", [13, 7])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("bs", [2, 3])
def test_ranks_are_disjoint_and_cover_the_data_like_distributed_sampler(launches, n, drop_last, shuffle, bs):
    """N not divisible by the world size nor by the batch size: equal batch counts; drop_last=False pads
    (the order's start repeated, one sample here) and reads every sample; drop_last=True reads none twice."""
    runs = [r["coverage"][f"d{n}-{drop_last}-{shuffle}-{bs}"] for r in launches[0]]
    assert runs[0]["len"] == runs[1]["len"] == per_rank_sizes(n, drop_last, bs)
    for epoch in (0, 1):
        ids = [sum(r["epochs"][epoch], []) for r in runs]
        both = ids[0] + ids[1]
        if drop_last:
            assert len(set(both)) == len(both), "no sample twice"
            assert len(both) == runs[0]["len"] * bs * 2
        else:
            assert sorted(set(both)) == list(range(n)), "every sample read"
            assert len(both) == n + 1 and len(ids[0]) == len(ids[1]), "one sample repeated, as DistributedSampler"
    if shuffle:
        assert runs[0]["epochs"][0] != runs[0]["epochs"][1], "set_epoch reshuffles"
        assert runs[0]["forgotten"][0] != runs[0]["forgotten"][1], "without set_epoch each pass reads the next epoch"
    assert runs[0]["forgotten"] == runs[0]["epochs"], "same seed, same order; passes without set_epoch = 0, 1"


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("form", ["pt", "json"])
def test_resume_mid_epoch_in_new_processes_is_bit_exact_with_mixing(launches, backend, form):
    for run, resumed in zip(*launches):
        run, resumed = run[backend], resumed[backend]
        assert resumed[f"mid-{form}"] == [run["epochs"][1][2:], run["epochs"][2]]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("kind", ["last", "end"])
def test_a_state_after_the_epochs_last_batch_resumes_at_the_next_epoch(launches, backend, kind):
    for run, resumed in zip(*launches):
        run, resumed = run[backend], resumed[backend]
        assert resumed[f"{kind}-pt"] == resumed[f"{kind}-json"] == [run["epochs"][1], run["epochs"][2]]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_state_saved_on_one_rank_resumes_the_other(launches, backend):
    """The state holds the epoch and the batches done, which are every rank's (Accelerate saves rank 0's)."""
    for run, resumed in zip(*launches):
        assert resumed[backend]["mid-other-rank"] == run[backend]["epochs"][1][2:]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_resume_after_a_bad_file_was_replaced_continues_exactly(launches, backend):
    for run, resumed in zip(*launches):
        assert BAD not in sum(run[backend]["bad"], [])
        assert len(run[backend]["bad"]) == run[backend]["bad_len"] == 3
        assert resumed[backend]["bad"] == run[backend]["bad"][1:]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_exact_evaluation_reads_every_good_sample_once_over_the_ranks(launches, backend):
    for run in launches[0]:
        everyone = run[backend]["exact"]
        assert sorted(everyone[0] + everyone[1]) == [i for i in range(12) if i != BAD]
    assert sum((r[backend]["exact_skipped"] for r in launches[0]), []) == [f"s{BAD:04d}.jpg"]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_states_that_do_not_fit_are_refused_naming_what_differs(launches, backend):
    for resumed in launches[1]:
        refused = resumed[backend]["refused"]
        assert "seed differs: the state has seed 7, this loader seed 8" in refused["seed"]
        assert "samples differs: the state has samples 13, this loader samples 7" in refused["dataset"]
        assert "dataset differs" in refused["renamed"]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_mid_epoch_state_reads_the_rest_on_another_batch_size_and_world_size(launches, backend):
    """Saved on 2 ranks after 2 batches of 2 (8 of 13 slots read), the 5 left are read on 2 ranks with batches of
    3 (padded to 6, as torch pads) and on 1 rank alone."""
    ranks = launches[1]
    read = sum((rank[backend]["resplit"]["read"] for rank in ranks), [])
    assert len(read) == len(set(read)) == 8
    left = sorted(set(range(13)) - set(read))
    three = sum((rank[backend]["resplit"]["batch_size"] for rank in ranks), [])
    assert len(three) == 6 and sorted(set(three)) == left
    for rank in ranks:  # each rank loaded its own state into a loader of world size 1: the same 5
        assert sorted(rank[backend]["resplit"]["world_size"]) == left


def test_a_pass_only_one_rank_starts_is_not_silent(launches):
    """Rank 0 peeks at a batch: its next pass (no set_epoch) reads epoch 1 while rank 1 reads epoch 0, so
    their shares overlap. DistributedSampler has no epoch to move; gpupipe warns on the rank that moved,
    and set_epoch at the start of the epoch (the documented loop) keeps the ranks together."""
    runs = [r["peek"] for r in launches[0]]
    plain = [r["plain"] for r in runs]
    assert len(set(plain[0]["ids"]) | set(plain[1]["ids"])) < 13, "the ranks read different epochs"
    assert plain[1]["warnings"] == []
    assert len(plain[0]["warnings"]) == 1 and "loader.set_epoch(epoch)" in plain[0]["warnings"][0]
    assert "epoch 0 was left after 1 of 4 batches" in plain[0]["warnings"][0]
    fixed = [r["set_epoch"] for r in runs]
    assert sorted(set(fixed[0]["ids"]) | set(fixed[1]["ids"])) == list(range(13))
    assert fixed[0]["warnings"] == fixed[1]["warnings"] == []


def test_a_left_pass_warns_only_with_several_shuffled_ranks_and_no_chosen_epoch(tmp_path):
    """The rule of ``EpochCursor.begin`` on one process (an explicit share of two ranks)."""
    import warnings

    import gpupipe
    from gpupipe.loading.epochs import RanksMayPart

    root = flat_folder(tmp_path / "d", 8)
    pipeline = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]

    def peek_then_pass(between=None, **kwargs):
        loader = gpupipe.loader(root, pipeline, batch_size=2, backend="torchvision", device="cpu",
                                num_threads=0, **kwargs)
        next(iter(loader))
        if between is not None:
            between(loader)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            list(loader)
            list(loader)  # after a finished pass: never
        return [w.category for w in caught]

    assert peek_then_pass(rank=0, world_size=2) == [RanksMayPart]
    assert peek_then_pass(lambda loader: loader.set_epoch(1), rank=0, world_size=2) == []
    assert peek_then_pass(lambda loader: loader.load_state_dict(loader.state_dict()), rank=0, world_size=2) == []
    assert peek_then_pass(rank=0, world_size=2, shuffle=False) == []
    assert peek_then_pass() == [], "one process: moving on is the documented rule"


@pytest.fixture(scope="module")
def lightning_steps(data, launches):
    """``{"full", "stopped", "resumed"}``: each rank's record of ``max_steps=6``; of ``max_steps=4``, stopped
    after batch 0 of epoch 1 with Lightning's default end-of-epoch checkpoint (both in the run's launch); and of
    ``max_steps=6`` resumed from that checkpoint in a new job (the resume's launch)."""
    out = data / "steps"
    return {name: sorted((json.loads((out / f"lightning-{name}-rank{r}.json").read_text()) for r in range(2)),
                         key=lambda r: r["rank"]) for name in ("full", "stopped", "resumed")}


def test_lightning_resumes_the_rest_of_an_epoch_that_max_steps_stopped(lightning_steps):
    """Lightning counts the stopped epoch as processed, writes its checkpoint there, and on restart sets the
    sampler's epoch to the next one while its loop continues the stopped epoch at batch 1: the loader gives
    that epoch's remaining batches (it gave the next epoch's, losing the rest of the stopped one)."""
    for full, stopped, resumed in zip(*(lightning_steps[k] for k in ("full", "stopped", "resumed"))):
        assert stopped["seen"] == full["seen"][:4]
        assert [(e, i) for e, i, _ in resumed["seen"]] == [(1, 1), (1, 2)]
        assert resumed["seen"] == full["seen"][4:6], f"rank {full['rank']}: the rest of epoch 1, exactly"


def test_only_a_loop_that_continues_the_stopped_epoch_keeps_the_state_past_the_next_set_epoch():
    from gpupipe.loading.epochs import EpochCursor

    cursor = EpochCursor()
    cursor.load(1, 1)
    cursor.set_epoch(2, loop_continues=True)  # Lightning's fit loop after a max_steps stop
    assert cursor.state() == (1, 1)
    started = cursor.begin(3)
    assert (started.epoch, started.start) == (1, 1)
    cursor.set_epoch(2, loop_continues=True)  # the state is used: the next epoch, as set
    assert cursor.begin(3).epoch == 2
    for epoch, kept in ((3, False), (1, True), (0, False)):
        cursor.load(1, 1)
        cursor.set_epoch(epoch, loop_continues=True)
        assert cursor.state() == ((1, 1) if kept else (epoch, 0)), epoch
    cursor.load(1, 1)
    cursor.set_epoch(2)  # a user's set_epoch: another epoch drops the state, as before
    assert cursor.state() == (2, 0)


def test_a_loader_built_on_one_rank_only_says_what_it_waits_for(launches):
    """Rank 0 builds a loader of the group's share (no ``world_size=1``) while rank 1 is elsewhere: rank 0
    waits in the loader's exchange, as any collective; it now logs which ranks it waits for and why, instead
    of a silent wait (until the process group's timeout gives a transport error). Rank 1 comes 4 s late here,
    rank 0 says so after 1 s (``redteam_ddp_worker.waits``, in the run's launch: 7 samples, 2 batches of 2 a
    rank)."""
    ranks = [r["waits"] for r in launches[0]]
    assert ranks[1]["notices"] == [] and ranks[0]["len"] == ranks[1]["len"] == 2
    assert ranks[0]["notices"], "rank 0 said it was waiting"
    notice = ranks[0]["notices"][0]
    assert "rank 0 waits for rank 1" in notice and "rank=0, world_size=1" in notice
