"""Red team, round 10 (issue 35, items 10, 12, 14-16): what a resume must match, every bound named, ranks agree.

A state records the classes and the labels of the dataset (a resume into other classes or labels is refused by
name), and the pipeline (a resume into another warns, ``PipelineChanged``, and reads the same samples); a resume on
another backend, dtype, memory format, prefetch or thread count is exact and silent. A state edited by hand (a
string, float or bool where an int belongs, a zero or negative world or batch size, a rank outside its world, a
format below 1) is refused naming the field, not failed as a ``TypeError`` or ``ZeroDivisionError``. Numeric
settings take numpy ints and 0-d integer tensors alike, on both CPU backends. Under a real torchrun (gloo, 2 ranks,
one launch: ``redteam_state10_worker.py``): ranks whose pipelines, dtypes, backends, classes or labels differ are
refused on every rank naming the field and the ranks; ranks whose threads and prefetch differ agree; rank 0 alone
reads, saves and resumes an evaluation loader while rank 1 waits at a barrier; a ``new_group`` share works; loaders
built after ``destroy_process_group`` join no collective.
"""

import io
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import CPU_BACKEND_NAMES, HAS_DALI, flat_folder, sample_ids

import gpupipe
from gpupipe.loading.identity import PipelineChanged

HERE = Path(__file__).parent
WORKER = HERE / "redteam_state10_worker.py"
N = 14
CLASSES = ["class_0", "class_1", "class_2"]


def pipeline(size=8, dtype="uint8", channels_last=False):
    """``size`` px images whose float form is the uint8 one over 255 (mean 0, std 1), so ``ids`` reads either."""
    return [
        gpupipe.Decode(),
        gpupipe.Resize((size, size)),
        gpupipe.Normalize(mean=(0.0,) * 3, std=(1.0,) * 3),
        gpupipe.Output(dtype, channels_last=channels_last),
    ]


def make(source, **kw):
    kw = {"batch_size": 3, "seed": 5, "backend": "torchvision", **kw}
    kw.setdefault("num_threads", 0 if kw["backend"] == "torchvision" else 1)
    return gpupipe.loader(source, kw.pop("pipeline", pipeline()), device="cpu", **kw)


def ids(images) -> list:
    if images.dtype != torch.uint8:
        images = (images * 255).round().clamp(0, 255).to(torch.uint8)
    return sample_ids(images)


def read(batches) -> list:
    return [ids(images) for images, _ in batches]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return flat_folder(tmp_path_factory.mktemp("state10") / "flat", N)


def entries(folder: Path, relabel: bool = False) -> list:
    found = sorted(folder.rglob("*.png"))
    return [(str(p), "class_2" if relabel and i == 4 else p.parent.name) for i, p in enumerate(found)]


def saved(loader, batches: int):
    """``(state after batches, the rest of that pass)`` of ``loader``."""
    it = iter(loader)
    for _ in range(batches):
        next(it)
    return loader.state_dict(), read(it)


# -- what a resume must match --------------------------------------------------------------------------------------


@pytest.mark.parametrize("batches", [0, 2])
@pytest.mark.parametrize(
    "change, refusal",
    [
        (
            "classes",
            "classes differ: the state has classes \"['class_0', 'class_1', 'class_2']\", this loader classes "
            "\"['class_2', 'class_1', 'class_0']\"",
        ),
        ("labels", "labels differ"),
    ],
)
def test_a_state_refuses_a_loader_whose_classes_or_labels_differ(folder, batches, change, refusal):
    state, _ = saved(make(gpupipe.FileList(entries(folder), classes=CLASSES)), batches)
    if change == "classes":
        other = gpupipe.FileList(entries(folder), classes=CLASSES[::-1])
    else:
        other = gpupipe.FileList(entries(folder, relabel=True), classes=CLASSES)
    loader = make(other)
    assert loader.source.names == make(gpupipe.FileList(entries(folder), classes=CLASSES)).source.names
    with pytest.raises(ValueError, match=refusal.replace("[", r"\[").replace("]", r"\]")) as info:
        loader.load_state_dict(state)
    assert f"set_epoch({state['epoch']})" in str(info.value), "the remedy is named"


def test_the_same_classes_and_labels_listed_again_resume_exactly(folder):
    state, rest = saved(make(gpupipe.FileList(entries(folder), classes=CLASSES)), 2)
    again = make(gpupipe.FileList(list(reversed(entries(folder))), classes=CLASSES))  # same files, another order
    with pytest.raises(ValueError, match="dataset differs"):
        again.load_state_dict(state)
    loader = make(gpupipe.FileList(entries(folder), classes=CLASSES))
    loader.load_state_dict(state)
    assert read(loader) == rest


@pytest.mark.parametrize("backend", CPU_BACKEND_NAMES)
def test_a_resume_on_another_backend_dtype_layout_prefetch_or_threads_is_exact_and_silent(folder, backend):
    state, rest = saved(make(str(folder)), 2)
    state = json.loads(json.dumps(state))  # a JSON round trip keeps it whole
    loader = make(
        str(folder),
        backend=backend,
        pipeline=pipeline(dtype="float32", channels_last=True),
        prefetch=4,
        num_threads=1 if backend == "torchvision" else 2,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader.load_state_dict(state)
    assert read(loader) == rest


def test_a_resume_into_another_pipeline_warns_naming_it_and_reads_the_same_samples(folder):
    state, rest = saved(make(str(folder)), 2)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    loader = make(str(folder), pipeline=pipeline(size=9))
    with pytest.warns(PipelineChanged, match="pipeline"):
        loader.load_state_dict(state)
    assert read(loader) == rest


# -- an edited state ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("batch_size", "3"),
        ("batch_size", 3.0),
        ("batch_size", True),
        ("batch_size", 0),
        ("batch_size", -3),
        ("world_size", "1"),
        ("world_size", 0),
        ("world_size", -1),
        ("world_size", 2.0),
        ("rank", 1),
        ("rank", -1),
        ("rank", "0"),
        ("shuffle", 1),
        ("shuffle", "True"),
        ("drop_last", "False"),
        ("drop_last", None),
        ("samples", "14"),
        ("samples", -14),
        ("dataset", 5),
        ("classes", ["class_0"]),
        ("labels", 7),
        ("format", 0),
        ("format", -1),
        ("format", "3"),
        ("seed", -5),
        ("seed", 2**64),
        ("epoch", "0"),
        ("epoch", -1),
        ("batches_done", 2.0),
        ("batches_done", -1),
        ("batches_done", 99),
    ],
)
def test_an_edited_state_is_refused_naming_the_field(folder, field, value):
    state, _ = saved(make(str(folder)), 2)
    with pytest.raises(ValueError, match=field):
        make(str(folder)).load_state_dict({**state, field: value})


@pytest.mark.parametrize("missing", ["epoch", "batches_done", "seed"])
def test_a_state_without_its_position_is_no_state(folder, missing):
    state, _ = saved(make(str(folder)), 1)
    with pytest.raises(ValueError, match="not a gpupipe loader state"):
        make(str(folder)).load_state_dict({k: v for k, v in state.items() if k != missing})


def test_the_state_of_another_loader_is_refused_in_a_line_not_a_dump(folder):
    """A torchdata ``StatefulDataLoader``'s state (or a whole checkpoint) given by mistake."""
    other = {"_num_yielded": 3, "_sampler_iter_state": {"samples_yielded": list(range(100_000))}, "_index": 2}
    with pytest.raises(ValueError, match="not a gpupipe loader state") as info:
        make(str(folder)).load_state_dict(other)
    assert len(str(info.value)) < 300


def test_numpy_and_tensor_ints_in_a_state_load_as_ints(folder):
    state, rest = saved(make(str(folder)), 2)
    edited = {
        **state,
        "epoch": np.int64(0),
        "batches_done": torch.tensor(2),
        "batch_size": np.int32(3),
        "seed": np.uint64(5),
        "world_size": torch.tensor(1),
        "shuffle": np.bool_(True),
    }
    loader = make(str(folder))
    loader.load_state_dict(edited)
    assert read(loader) == rest


# -- numeric settings ---------------------------------------------------------------------------------------------


def test_numpy_numbers_are_taken_as_their_python_values(folder):
    plain = make(str(folder), rank=0, world_size=1, preallocate=(16, 16), hw_decoder_load=0.5)
    loader = make(
        str(folder),
        rank=np.int64(0),
        world_size=np.int32(1),
        batch_size=np.int64(3),
        preallocate=(np.int64(16), np.int64(16)),
        hw_decoder_load=np.float32(0.5),
    )
    assert (loader.rank, loader.world_size, loader.batch_size) == (0, 1, 3)
    assert type(loader.rank) is int and type(loader.batch_size) is int
    assert loader.config.preallocate == plain.config.preallocate == (16, 16)
    assert loader.config.hw_decoder_load == 0.5
    assert read(loader) == read(plain)


@pytest.mark.parametrize(
    "setting, value",
    [
        ("rank", True),
        ("rank", 0.0),
        ("rank", 1),
        ("world_size", True),
        ("world_size", 0),
        ("hw_decoder_load", float("nan")),
        ("hw_decoder_load", np.float64(1.5)),
        ("hw_decoder_load", np.bool_(True)),
        ("preallocate", (True, 4)),
        ("preallocate", (4.0, 4)),
        ("preallocate", (np.int64(-1), 4)),
        ("preallocate", (4, 4, 4)),
        ("batch_size", torch.tensor(2.0)),
        ("seed", np.int8(-1)),
        ("prefetch", np.bool_(True)),
    ],
)
def test_a_setting_out_of_bounds_is_refused_naming_it(folder, setting, value):
    with pytest.raises(ValueError, match=setting):
        make(str(folder), **{setting: value})


@pytest.mark.parametrize("backend", CPU_BACKEND_NAMES)
def test_set_epoch_takes_numpy_and_tensor_ints_and_refuses_the_rest_by_name(folder, backend):
    loader = make(str(folder), backend=backend)
    epochs = {}
    for epoch in (3, np.int64(3), np.uint32(3), torch.tensor(3)):
        loader.set_epoch(epoch)
        assert loader.epoch == 3 and type(loader.epoch) is int
        epochs[repr(epoch)] = read(loader)
    assert len({json.dumps(v) for v in epochs.values()}) == 1, "every form of 3 reads epoch 3"
    for bad in (True, 3.0, torch.tensor(3.0), torch.tensor([3]), -1, 2**62, 2**63 - 1, "3"):
        with pytest.raises(ValueError, match="set_epoch: epoch"):
            loader.set_epoch(bad)


@pytest.mark.parametrize(
    "ops, named",
    [
        ([gpupipe.Decode(), gpupipe.Resize((2**40, 2**40))], "Resize"),
        ([gpupipe.Decode(), gpupipe.RandomResizedCrop((40_000, 40_000))], "RandomResizedCrop"),
        ([gpupipe.Decode(), gpupipe.Resize((1, 2**31))], "Resize"),
    ],
)
def test_a_pipeline_whose_images_could_not_be_allocated_is_refused_when_built(folder, ops, named):
    """Was: built, then at the first batch torch's "Storage size calculation overflowed" (or an allocation of
    gigabytes per image)."""
    with pytest.raises(ValueError, match=f"{named}.*more than an image may have"):
        make(str(folder), pipeline=ops)


def test_a_bool_is_no_size(folder):
    with pytest.raises(ValueError, match="Resize: size"):
        gpupipe.Resize((True, 8))
    assert gpupipe.Resize((np.int64(8), 8)).size == (8, 8)


# -- under a real torchrun --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list:
    """One launch of two gloo ranks (``redteam_state10_worker.py``): each rank's ``{case: outcome}``."""
    tmp = tmp_path_factory.mktemp("state10-ddp")
    data = flat_folder(tmp / "folder", 20)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(WORKER),
        "--folder",
        str(data),
        "--out",
        str(tmp),
    ]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=200, env={**os.environ, "OMP_NUM_THREADS": "1"}
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the ranks hung for 200 s")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.slow
@pytest.mark.parametrize(
    "case, field, values",
    [
        ("normalize", "pipeline", ()),
        ("dtype", "pipeline", ()),
        ("resize", "pipeline", ()),
        ("on_error", "on_error", ("'raise' on rank 0", "'skip' on rank 1")),
        ("max_file_size", "max_file_size", ("1000000 on rank 0", "1000001 on rank 1")),
        (
            "classes",
            "classes",
            ("\"['class_0', 'class_1', 'class_2']\" on rank 0", "\"['class_2', 'class_1', 'class_0']\" on rank 1"),
        ),
        ("labels", "labels", ("on rank 0", "on rank 1")),
        pytest.param(
            "backend",
            "backend",
            ("'torchvision' on rank 0", "'dali-cpu' on rank 1"),
            marks=pytest.mark.skipif(not HAS_DALI, reason="needs DALI"),
        ),
    ],
)
def test_ranks_whose_pipelines_backends_classes_or_labels_differ_are_refused_by_name(ranks, case, field, values):
    for record in ranks:
        got = record["disagree"][case]
        assert got.get("error") == "RanksDisagree", f"{case}: refused on every rank, got {got}"
        assert f"{field} is " in got["message"]
        for value in values:
            assert value in got["message"]


@pytest.mark.slow
def test_ranks_whose_threads_and_prefetch_differ_agree(ranks):
    got = [record["disagree"]["threads"] for record in ranks]
    assert [g["len"] for g in got] == [5, 5]
    assert sorted(got[0]["ids"] + got[1]["ids"]) == list(range(20))


@pytest.mark.slow
def test_rank_0_alone_reads_saves_and_resumes_an_evaluation_loader(ranks):
    assert ranks[1]["alone"] == {}
    alone = ranks[0]["alone"]
    resume = alone["resume"]
    assert resume["state"]["world_size"] == 1 and resume["state"]["batches_done"] == 3
    assert resume["head"] + resume["rest"] == resume["whole"] and len(resume["whole"]) == 10
    assert alone["dataloader"] == {"len": 5, "batches": 5}


@pytest.mark.slow
def test_a_new_group_share_and_loaders_after_destroy_process_group_join_no_collective(ranks):
    sub = [record["subgroup"] for record in ranks]
    assert [s["len"] for s in sub] == [5, 5] and sorted(sub[0]["ids"] + sub[1]["ids"]) == list(range(20))
    for rank, record in enumerate(ranks):
        after = record["after_destroy"]
        assert after["alone"]["len"] == 10 and sorted(after["alone"]["ids"]) == list(range(20))
        assert after["launcher"]["ids"] == sub[rank]["ids"], "the launcher's share: RANK of WORLD_SIZE"


# -- a stale process is no rank ------------------------------------------------------------------------------------


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
@pytest.mark.parametrize("window, counted", [(0.5, "1"), (60.0, "6")])
def test_a_process_of_the_same_parent_started_long_before_is_no_rank(tmp_path, window, counted):
    """A shell that started a rank of an earlier launch in the background (it hangs on) and now this launch's
    rank: both are its children. Started ``STALE_SIBLING_S`` or more before, it is no rank of this launch."""
    job = {"MASTER_ADDR": "10.9.8.7", "MASTER_PORT": "41237", "WORLD_SIZE": "8"}
    clean = {k: v for k, v in os.environ.items() if k not in gpupipe.env.LOCAL_SIZE_VARS + ("LOCAL_RANK", "RANK")}
    stale = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], env={**clean, **job, "LOCAL_RANK": "5"}
    )
    try:
        time.sleep(1.5)  # the clock counts in ticks of 10 ms: well past the window of 0.5 s
        code = f"from gpupipe import env; env.STALE_SIBLING_S = {window}; print(env.local_world_size())"
        proc = subprocess.run(
            [sys.executable, "-c", code],
            env={**clean, **job, "LOCAL_RANK": "0"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.stdout.strip() == counted, proc.stdout + proc.stderr
    finally:
        stale.kill()
        stale.wait()
