"""The auto-augment policies' draws (RandAugment, TrivialAugment Wide, AutoAugment): which ops each
sample gets, with their magnitude bins and signs, indices into ``gpupipe.ops.AUGMENT_OPS`` /
``AUTO_AUGMENT_OPS``; every backend applies exactly these."""

from __future__ import annotations

import numpy as np

from .. import ops as O
from ..ops.pixel import AUTO_AUGMENT_OPS
from ..ops.registry import planner
from .draws import Params, Step, _randint


@planner(O.RandAugment)
def rand_augment(op: O.RandAugment, s: Step) -> Params:
    u = s.uniform(0, 2 * max(op.num_ops, 1)).reshape(len(s.keys), -1, 2)[:, : op.num_ops]
    count = len(O.AUGMENT_OPS)
    return {
        "ops": _randint(u[..., 0], np.full(u.shape[:2], count)).astype(np.int32),
        "signs": (u[..., 1] < 0.5).astype(np.int32),
    }


@planner(O.TrivialAugment)
def trivial_augment(op: O.TrivialAugment, s: Step) -> Params:
    u = s.uniform(0, 3)
    n = len(u)
    return {
        "ops": _randint(u[:, 0], np.full(n, len(O.AUGMENT_OPS))).astype(np.int32)[:, None],
        "bins": _randint(u[:, 1], np.full(n, op.num_magnitude_bins)).astype(np.int32),
        "signs": (u[:, 2] < 0.5).astype(np.int32)[:, None],
    }


@planner(O.AutoAugment)
def auto_augment(op: O.AutoAugment, s: Step) -> Params:
    """``v2.AutoAugment.forward``: a sub-policy drawn uniformly, each step applied when its coin
    ``<= p``, a signed op's magnitude negated when its coin ``<= 0.5``. A step not applied is ``Identity``."""
    policies = op.sub_policies
    steps = len(policies[0])
    u = s.uniform(0, 1 + 2 * steps)
    chosen = _randint(u[:, 0], np.full(len(u), len(policies)))
    index = np.array([[AUTO_AUGMENT_OPS.index(name) for name, _, _ in policy] for policy in policies])
    prob = np.array([[p for _, p, _ in policy] for policy in policies])
    bins = np.array([[m or 0 for _, _, m in policy] for policy in policies])
    applied = u[:, 1 : 1 + steps] <= prob[chosen]
    return {
        "ops": np.where(applied, index[chosen], 0).astype(np.int32),
        "bins": np.where(applied, bins[chosen], 0).astype(np.int32),
        "signs": (u[:, 1 + steps :] <= 0.5).astype(np.int32),
    }
