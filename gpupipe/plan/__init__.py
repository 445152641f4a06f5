"""The plan: every random parameter of a batch, drawn once on the host, applied by every backend.

A backend never draws random numbers of its own. For each batch the
:class:`Planner` draws each op's parameters (:mod:`.draws`) from the samples'
keys (a function of the loader's seed, the epoch and the sample's slot,
:mod:`gpupipe.seeding`) and their image sizes, with each geometric op's
affine map (:mod:`.affine`); the backend applies them to the image and to
every target alike. So the same seed gives the same augmentations on DALI
and torchvision, and a resumed epoch repeats them exactly.
"""

from .draws import PLANNERS, Params, Step
from .planner import BatchPlan, Planner

__all__ = ["Planner", "BatchPlan", "Params", "Step", "PLANNERS"]
