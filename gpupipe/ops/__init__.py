"""Backend-neutral image ops: what happens to each image (and its targets), as plain data.

Ops import neither DALI nor torchvision. A pipeline is a list of ops that
starts with ``Decode``; each backend compiles the list with its own
lowering table. Every op is a frozen dataclass whose arguments are
validated at construction, so a bad value fails where it was written. As in
torchvision, the main argument(s) may be positional (``RandomResizedCrop(224)``,
``Normalize(mean, std)``); the others are keyword-only.

Each op declares what it does (``Op.effect``), the size of its output
(``Op.output_size``) and the target kinds it can carry (``Op.carries``).
An op class registers itself when it is defined (``registry``); ``OP_TYPES``
and the op names of ``__all__`` are read from the registry (``catalog``).
The imports of the op classes below spell the same names out for type checkers
(``tests/test_op_registry.py`` checks that they agree).
"""

from .base import HW, Effect, Op, SizeArg
from .batch import OUTPUT_DTYPES, BatchOp
from .batch import CutMix as CutMix
from .batch import MixUp as MixUp
from .batch import Output as Output
from .batch import SanitizeBoxes as SanitizeBoxes
from .catalog import OP_NAMES, OP_TYPES
from .geometry import CenterCrop as CenterCrop
from .geometry import Decode as Decode
from .geometry import HorizontalFlip as HorizontalFlip
from .geometry import PadTo as PadTo
from .geometry import RandomAffine as RandomAffine
from .geometry import RandomCrop as RandomCrop
from .geometry import RandomIoUCrop as RandomIoUCrop
from .geometry import RandomResize as RandomResize
from .geometry import RandomResizedCrop as RandomResizedCrop
from .geometry import RandomRotation as RandomRotation
from .geometry import RandomZoomOut as RandomZoomOut
from .geometry import Resize as Resize
from .geometry import VerticalFlip as VerticalFlip
from .pixel import AUGMENT_OPS, IMAGENET_MEAN, IMAGENET_STD
from .pixel import AutoAugment as AutoAugment
from .pixel import ColorJitter as ColorJitter
from .pixel import GaussianBlur as GaussianBlur
from .pixel import Normalize as Normalize
from .pixel import RandAugment as RandAugment
from .pixel import RandomErasing as RandomErasing
from .pixel import RandomGrayscale as RandomGrayscale
from .pixel import TrivialAugment as TrivialAugment
from .registry import RegistryError, register

__all__ = [
    "Op",
    "Effect",
    "SizeArg",
    "HW",
    "BatchOp",
    "OP_TYPES",
    "OP_NAMES",
    "register",
    "RegistryError",
    *OP_NAMES,
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "OUTPUT_DTYPES",
    "AUGMENT_OPS",
]
