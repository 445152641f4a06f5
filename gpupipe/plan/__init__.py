"""The plan: every random parameter of a batch, drawn once on the host, applied by every backend.

A backend never draws random numbers of its own. For each batch the
``Planner`` draws each op's parameters (``draws``: each op's planner,
registered with ``@planner(OpType)`` next to its code) from the samples'
keys (a function of the loader's seed, the epoch and the sample's slot,
``gpupipe.plan.seeding``) and their image sizes, with each geometric op's
affine map (``affine``); the backend applies them to the image and to
every target alike. So the same seed gives the same augmentations on DALI
and torchvision, and a resumed epoch repeats them exactly.
"""

from .draws import PLANNERS, Params, Step, planner
from .planner import BatchPlan, Planner

__all__ = ["Planner", "BatchPlan", "Params", "Step", "PLANNERS", "planner"]
