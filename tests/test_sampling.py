"""Epoch orders and rank shards: properties over many dataset and world sizes."""

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupipe.sampling import epoch_order, per_rank, shard


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 300), world=st.integers(1, 9), drop_last=st.booleans(), epoch=st.integers(0, 5))
def test_shards_are_equal_and_cover_or_partition(n, world, drop_last, epoch):
    order = epoch_order(n, seed=1, epoch=epoch, shuffle=True)
    parts = [shard(order, rank=r, world_size=world, drop_last=drop_last) for r in range(world)]
    sizes = {len(p.indices) for p in parts}
    assert sizes == {per_rank(n, world, drop_last)}, "every rank reads as many samples"
    every = [i for p in parts for i in p.indices]
    if drop_last:
        assert len(every) == len(set(every)), "no sample twice"
        assert parts[0].dropped == n - len(every) and parts[0].padded == 0
    else:
        assert set(every) == set(range(n)), "every sample at least once"
        assert parts[0].padded == len(every) - n and parts[0].dropped == 0


def test_order_depends_only_on_seed_and_epoch():
    assert epoch_order(50, seed=3, epoch=2, shuffle=True) == epoch_order(50, seed=3, epoch=2, shuffle=True)
    assert epoch_order(50, seed=3, epoch=2, shuffle=True) != epoch_order(50, seed=3, epoch=3, shuffle=True)
    assert epoch_order(5, seed=3, epoch=2, shuffle=False) == [0, 1, 2, 3, 4]


def test_shard_matches_distributed_sampler():
    from torch.utils.data import DistributedSampler

    class Sized:
        def __len__(self):
            return 11

    for drop_last in (False, True):
        for rank in range(3):
            theirs = DistributedSampler(Sized(), num_replicas=3, rank=rank, shuffle=False, drop_last=drop_last)
            ours = shard(list(range(11)), rank=rank, world_size=3, drop_last=drop_last)
            assert ours.indices == list(theirs)
