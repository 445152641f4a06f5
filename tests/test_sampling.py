"""Epoch orders and rank shares: properties over many dataset and world sizes."""

import numpy as np
import pytest

pytest.importorskip("hypothesis")  # the test extra; plain pytest skips this module
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupipe.env import World, settle_world
from gpupipe.loading.sampling import RankShare, epoch_order, per_rank, split


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 300), world=st.integers(1, 9), drop_last=st.booleans(), epoch=st.integers(0, 5))
def test_even_shares_are_equal_and_cover_or_partition(n, world, drop_last, epoch):
    order = epoch_order(n, seed=1, epoch=epoch, shuffle=True)
    parts = [split(order, rank=r, world_size=world, drop_last=drop_last) for r in range(world)]
    assert {len(p) for p in parts} == {per_rank(n, world, drop_last=drop_last)}, "every rank reads as many samples"
    every = [i for p in parts for i in p.indices]
    positions = [i for p in parts for i in p.positions]
    assert len(positions) == len(set(positions)), "each slot has its own position (it keys the augmentation)"
    if drop_last:
        assert len(every) == len(set(every)), "no sample twice"
        assert parts[0].dropped == n - len(every) and parts[0].padded == 0
    else:
        assert set(every) == set(range(n)), "every sample at least once"
        assert parts[0].padded == len(every) - n and parts[0].dropped == 0


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 300), world=st.integers(1, 9), epoch=st.integers(0, 5))
def test_uneven_shares_read_each_sample_exactly_once(n, world, epoch):
    order = epoch_order(n, seed=2, epoch=epoch, shuffle=True)
    parts = [split(order, rank=r, world_size=world, drop_last=False, even_batches=False) for r in range(world)]
    every = sorted(int(i) for p in parts for i in p.indices)
    assert every == list(range(n)), "every sample once, none repeated, none cut"
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == [per_rank(n, world, drop_last=False, even_batches=False, rank=r) for r in range(world)]


def test_order_depends_only_on_seed_and_epoch():
    assert np.array_equal(epoch_order(50, seed=3, epoch=2, shuffle=True), epoch_order(50, seed=3, epoch=2, shuffle=True))
    assert not np.array_equal(epoch_order(50, seed=3, epoch=2, shuffle=True),
                              epoch_order(50, seed=3, epoch=3, shuffle=True))
    assert epoch_order(5, seed=3, epoch=2, shuffle=False).tolist() == [0, 1, 2, 3, 4]


def test_split_matches_distributed_sampler():
    from torch.utils.data import DistributedSampler

    class Sized:
        def __len__(self):
            return 11

    for drop_last in (False, True):
        for rank in range(3):
            theirs = DistributedSampler(Sized(), num_replicas=3, rank=rank, shuffle=False, drop_last=drop_last)
            ours = split(np.arange(11), rank=rank, world_size=3, drop_last=drop_last)
            assert ours.indices.tolist() == list(theirs)


def test_rank_share_repr_is_short():
    share = split(np.arange(100_000), rank=0, world_size=3, drop_last=False)
    assert repr(share) == "RankShare(33334 samples, padded=2, dropped=0)"
    assert isinstance(share, RankShare)


def test_a_share_taken_before_the_process_group_gives_way_to_the_groups():
    assert settle_world(World(0, 1, "launcher"), (1, 2)) == World(1, 2, "group")
    assert settle_world(World(0, 1, "launcher"), None) == World(0, 1, "launcher"), "no group yet: wait"
    assert settle_world(World(1, 2, "argument"), (1, 2)) == World(1, 2, "argument")
    assert settle_world(World(0, 1, "argument"), (1, 2)) == World(0, 1, "argument"), "world_size=1, asked for"


@pytest.mark.parametrize("world, group", [(World(0, 3, "argument"), (1, 2)), (World(0, 2, "group"), (3, 4))])
def test_a_share_that_disagrees_with_the_process_group_is_one_clear_error(world, group):
    with pytest.raises(ValueError) as info:
        settle_world(world, group)
    message = str(info.value)
    assert "\n" not in message and str(world) in message and f"rank {group[0]} of {group[1]}" in message


def test_an_unsampled_share_gives_way_only_to_a_framework_that_shards():
    """gpupipe.DataLoader without a sampler: every sample in every process, as torch's, unless Lightning or
    Accelerate drives it (they shard a torch DataLoader given without a sampler)."""
    unsampled = World(0, 1, "unsampled")
    assert settle_world(unsampled, (1, 2)) == unsampled, "plain torchrun: every process reads everything"
    assert settle_world(unsampled, (1, 2), lambda: True) == World(1, 2, "framework")
    assert settle_world(unsampled, None, lambda: True) == unsampled, "no group yet: wait"
    assert settle_world(World(1, 2, "framework"), (1, 2), lambda: True) == World(1, 2, "framework")
    assert settle_world(World(1, 2, "framework"), (1, 2)) == unsampled, "outside the framework: everything again"
    assert settle_world(World(1, 2, "framework"), None) == unsampled, "the group is gone: everything again"
