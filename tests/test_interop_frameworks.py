"""Issue 33: with ``loader.dataset`` there, Accelerate stays safe (the real Accelerate, 2 CPU processes,
gloo, under torchrun): ``prepare`` leaves gpupipe loaders as they are, and ``skip_first_batches`` fails
at once pointing to ``loader.skip(n)`` instead of building a torch DataLoader over the dataset."""

import pytest

pytest.importorskip("accelerate")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ranks(accelerate_launch):
    """Each rank's record (accelerate_interop_worker.py), from the one Accelerate launch (conftest.py) of
    tests/test_frameworks.py's Accelerate tests: 24 samples, torchvision."""
    return accelerate_launch.interop


def test_prepare_leaves_gpupipe_loaders(ranks):
    for run in ranks:
        assert run["types"] == ["Loader", "Loader"]


def test_skip_first_batches_fails_at_once_pointing_to_loader_skip(ranks):
    for run in ranks:
        for skip in run["skips"]:
            assert "type" not in skip, f"built {skip.get('type')}"
            assert "loader.skip(n)" in skip["error"] and skip["attribute_error"]


def test_loader_skip_and_the_dataset_and_sampler_lengths(ranks):
    for run in ranks:
        for full, skipped in zip(run["full"], run["skipped"]):
            assert skipped == full[1:], "loader.skip(1): the same epoch from its second batch"
        assert run["lengths"] == [[24, 12, 3], [24, 12, 3]]
    assert sorted(sum(ranks[0]["full"][0] + ranks[1]["full"][0], [])) == list(range(24))
