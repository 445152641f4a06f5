"""Red team of the swap, part 6: torchvision's reference classification recipe (its train and eval presets,
v1 and v2, "pil" and "tensor" backends) swapped as it is, ``RandomApply`` given one transform rather than a
list, a CutMix / MixUp ``collate_fn``, ``target_transform`` values of numpy and bool types, an in-memory
(CIFAR-like) dataset, and photos that gpupipe decodes otherwise than torchvision's PIL loader (EXIF
orientation, 16-bit grey PNGs: see docs/torchvision.md); each compared with torch's own
``DataLoader`` on tiny images."""

import re
import warnings

import numpy as np
import pytest
import torch
from exif_helpers import turned_png
from helpers import CPU_BACKENDS, textured_image, write_image
from PIL import Image
from torch.utils.data import default_collate
from torchvision import transforms as T1
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2 as T2

import gpupipe
from gpupipe import ops
from gpupipe.interop.compile import UnsupportedTransform
from gpupipe.interop.dataloader import UnsupportedArgument
from gpupipe.interop.datasets import UnsupportedDataset

F32 = torch.float32
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
BILINEAR = T1.InterpolationMode.BILINEAR
#: Image sizes (h, w): no two alike.
SIZES = [(41, 57), (60, 44), (48, 48), (75, 52), (43, 70), (66, 61)]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """Six PNGs (lossless: PIL and gpupipe decode the same pixels) in two classes."""
    base = tmp_path_factory.mktemp("swap6")
    rng = np.random.default_rng(6)
    for i, (h, w) in enumerate(SIZES):
        write_image(base / "data" / ("cat" if i % 3 else "dog") / f"{i}.png", textured_image(rng, h, w))
    return str(base / "data")


def ours(dataset, backend="torchvision", **kwargs):
    """``(images, labels)`` of one gpupipe batch holding the whole dataset (on the CPU)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        images, labels = next(iter(gpupipe.DataLoader(dataset, batch_size=len(dataset), backend=backend, **kwargs)))
    return images.cpu(), labels.cpu()


def theirs(dataset):
    """``(images, labels)`` of torch's ``DataLoader``, one batch holding the whole dataset."""
    return next(iter(torch.utils.data.DataLoader(dataset, batch_size=len(dataset))))


# --- 1. the reference recipe's presets (references/classification/presets.py), written out -----------------


def train_preset(T, policy, backend, v2):
    """``ClassificationPresetTrain(crop_size=32, auto_augment_policy=policy, random_erase_prob=0.1, backend=...)``."""
    steps = [T.PILToTensor()] if backend == "tensor" else []
    steps += [T.RandomResizedCrop(32, interpolation=BILINEAR, antialias=True), T.RandomHorizontalFlip(0.5)]
    steps.append(
        {
            "ra": lambda: T.RandAugment(interpolation=BILINEAR, magnitude=9),
            "ta_wide": lambda: T.TrivialAugmentWide(interpolation=BILINEAR),
            "augmix": lambda: T.AugMix(interpolation=BILINEAR, severity=3),
            "imagenet": lambda: T.AutoAugment(T.AutoAugmentPolicy("imagenet"), interpolation=BILINEAR),
            "cifar10": lambda: T.AutoAugment(T.AutoAugmentPolicy("cifar10"), interpolation=BILINEAR),
        }[policy]()
    )
    if backend == "pil":
        steps.append(T.PILToTensor())
    steps += [T.ToDtype(F32, scale=True) if v2 else T.ConvertImageDtype(F32), T.Normalize(MEAN, STD)]
    steps.append(T.RandomErasing(p=0.1))
    return T.Compose(steps + ([T.ToPureTensor()] if v2 else []))


def eval_preset(T, backend, v2):
    """``ClassificationPresetEval(crop_size=32, resize_size=36, backend=...)``."""
    steps = [T.PILToTensor()] if backend == "tensor" else []
    steps += [T.Resize(36, interpolation=BILINEAR, antialias=True), T.CenterCrop(32)]
    if backend == "pil":
        steps.append(T.PILToTensor())
    steps += [T.ToDtype(F32, scale=True) if v2 else T.ConvertImageDtype(F32), T.Normalize(MEAN, STD)]
    return T.Compose(steps + ([T.ToPureTensor()] if v2 else []))


POLICY_OPS = {
    "ra": ops.RandAugment(2, 9, num_magnitude_bins=31, interpolation="bilinear", fill=(0.0, 0.0, 0.0)),
    "ta_wide": ops.TrivialAugment(num_magnitude_bins=31, interpolation="bilinear", fill=(0.0, 0.0, 0.0)),
    "imagenet": ops.AutoAugment("imagenet", interpolation="bilinear", fill=(0.0, 0.0, 0.0)),
}


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("backend", ["pil", "tensor"])
@pytest.mark.parametrize("policy", list(POLICY_OPS))
def test_the_reference_train_preset_compiles_to_its_ops_every_parameter_kept(policy, backend, v2):
    transform = train_preset(T2 if v2 else T1, policy, backend, v2)
    assert gpupipe.from_torchvision(transform) == [
        ops.Decode(),
        ops.RandomResizedCrop(32, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)),
        ops.HorizontalFlip(0.5),
        POLICY_OPS[policy],
        ops.RandomErasing(0.1, scale=(0.02, 0.33), ratio=(0.3, 3.3)),
        ops.Normalize(MEAN, STD),
    ]


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("policy, named", [("augmix", "AugMix"), ("cifar10", "policy=CIFAR10")])
def test_the_reference_train_presets_gpupipe_has_no_op_for_are_refused_naming_them(policy, named, v2):
    with pytest.raises(UnsupportedTransform, match=re.escape(named)) as refused:
        gpupipe.from_torchvision(train_preset(T2 if v2 else T1, policy, "pil", v2))
    assert "Compose[2]" in str(refused.value) and "fallback='torchvision'" in str(refused.value)


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("preset_backend", ["pil", "tensor"])
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_the_reference_eval_preset_gives_torchs_batches(root, preset_backend, v2, backend):
    """The eval preset on PIL images and on uint8 tensors (``backend="tensor"``: PILToTensor first, then an
    antialiased tensor resize): torch's shapes, dtype, labels and pixels within the documented tolerance."""
    dataset = ImageFolder(root, eval_preset(T2 if v2 else T1, preset_backend, v2))
    want, want_labels = theirs(dataset)
    images, labels = ours(dataset, backend)
    assert images.shape == want.shape == (6, 3, 32, 32) and images.dtype == want.dtype == F32
    assert labels.tolist() == want_labels.tolist() == dataset.targets
    diff = (images - want).abs() * torch.tensor(STD).view(1, 3, 1, 1) * 255  # in levels
    assert float(diff.mean()) <= 0.6 and float(diff.max()) <= 2.5, (float(diff.mean()), float(diff.max()))


# --- 2. RandomApply given one transform (v1 takes it, then fails at the first image) -------------------------


@pytest.mark.parametrize("inner", [T1.RandomHorizontalFlip(1.0), T1.Compose([T1.RandomHorizontalFlip(1.0)])])
def test_random_apply_given_one_transform_not_a_list_is_refused_naming_it(root, inner):
    """Before: a bare ``TypeError: 'RandomHorizontalFlip' object is not iterable`` from inside gpupipe when the
    loader was built, naming no transform; torch's ``DataLoader`` raises that ``TypeError`` at the first image.
    Now: the ``UnsupportedTransform`` naming the ``RandomApply``, its place and how to write it."""
    transform = T1.Compose([T1.RandomApply(inner, p=0.5), T1.ToTensor()])
    torch.manual_seed(0)  # RandomApply draws from the global generator: some of the 6 images take the transform
    with pytest.raises(TypeError):  # torch's own, at the first image it applies to
        theirs(ImageFolder(root, transform))
    with pytest.raises(UnsupportedTransform, match=r"Compose\[0\] RandomApply: transforms=\w+\(\.\.\.\) is one "):
        gpupipe.DataLoader(ImageFolder(root, transform), batch_size=2)
    in_a_list = T1.Compose([T1.RandomApply([inner], p=0.5), T1.ToTensor()])
    assert gpupipe.from_torchvision(in_a_list) == [ops.Decode(), ops.HorizontalFlip(0.5)]


def test_random_apply_that_changes_nothing_compiles_to_nothing_and_one_that_converts_is_refused():
    """An empty ``RandomApply`` (or one around ``RGB()``) changes no image, as in torchvision; one around
    ``ToTensor()`` would leave half the images PIL (torch's collate fails) and stays refused."""
    assert gpupipe.from_torchvision(T1.Compose([T1.RandomApply([], p=0.5), T1.ToTensor()])) == [ops.Decode()]
    assert gpupipe.from_torchvision(T2.Compose([T2.RandomApply([T2.RGB()], p=0.5), T2.ToTensor()])) == [ops.Decode()]
    with pytest.raises(UnsupportedTransform, match=r"p=0.5 around ToTensor"):
        gpupipe.from_torchvision(T1.Compose([T1.RandomApply([T1.ToTensor()], p=0.5)]))


# --- 3. a CutMix / MixUp collate_fn, target_transform types, an in-memory dataset ---------------------------


@pytest.mark.parametrize("fallback", [None, "torchvision"])
def test_a_cutmix_or_mixup_collate_is_refused_naming_collate_fn_for_a_folder_gpupipe_reads(root, fallback):
    """The reference recipe's ``collate_fn`` (``RandomChoice([MixUp, CutMix])`` over ``default_collate``): gpupipe
    reads the folder and makes the batches, so it is refused, naming it, rather than left out (hard labels
    where torch's give soft ones)."""
    mix = T2.RandomChoice([T2.MixUp(num_classes=2), T2.CutMix(num_classes=2)])
    dataset = ImageFolder(root, eval_preset(T2, "pil", True))
    _, soft = mix(*default_collate([dataset[i] for i in range(4)]))
    assert soft.shape == (4, 2) and soft.dtype == F32  # torch's: soft targets
    with pytest.raises(UnsupportedArgument, match=r"collate_fn=.*gpupipe batches images itself"):
        gpupipe.DataLoader(dataset, batch_size=4, collate_fn=lambda b: mix(*default_collate(b)), fallback=fallback)


TARGETS = {
    "bool": lambda y: y > 0,
    "numpy int32": np.int32,
    "numpy float32": np.float32,
    "numpy uint8": np.uint8,
    "numpy array (1,)": lambda y: np.array([y]),
    "uint8 tensor (1,)": lambda y: torch.tensor([y], dtype=torch.uint8),
}


@pytest.mark.parametrize("name", list(TARGETS))
def test_target_transform_values_of_numpy_and_bool_types_batch_as_torchs(root, name):
    dataset = ImageFolder(root, eval_preset(T2, "pil", True), target_transform=TARGETS[name])
    _, want = theirs(dataset)
    _, labels = ours(dataset)
    assert labels.dtype == want.dtype and labels.shape == want.shape and torch.equal(labels, want)


class InMemory(torch.utils.data.Dataset):
    """CIFAR10's shape: uint8 ``(N, 32, 32, 3)`` in memory, ``targets``, a transform on the PIL image."""

    def __init__(self, transform):
        self.data = np.random.default_rng(3).integers(0, 256, (10, 32, 32, 3), dtype=np.uint8)
        self.targets = [i % 4 for i in range(10)]
        self.transform = transform

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.transform(Image.fromarray(self.data[i])), self.targets[i]


def test_an_in_memory_dataset_is_refused_by_name_and_read_as_it_is_with_the_fallback():
    transform = T1.Compose([T1.ToTensor(), T1.Normalize((0.49, 0.48, 0.45), (0.25, 0.24, 0.26))])
    dataset = InMemory(transform)
    with pytest.raises(UnsupportedDataset, match=r"cannot read a InMemory.*fallback='torchvision'"):
        gpupipe.DataLoader(dataset, batch_size=10)
    want, want_labels = theirs(dataset)
    images, labels = ours(dataset, fallback="torchvision")
    assert torch.equal(images, want) and torch.equal(labels, want_labels)


# --- 4. files gpupipe decoded otherwise than torchvision's PIL loader (now read as it reads them) ------------


def _torchs_or_refused(dataset, name):
    """Passes when gpupipe gives torch's batch, or refuses naming the file; fails when it gives other pixels."""
    want, _ = theirs(dataset) if len({dataset[i][0].shape for i in range(len(dataset))}) == 1 else (None, None)
    try:
        images, _ = ours(dataset)
    except (UnsupportedDataset, ValueError) as refused:
        assert name in str(refused)
        return
    assert want is not None and images.shape == want.shape and torch.equal(images, want)


@pytest.mark.parametrize("orientation", [6, 3])
def test_a_photo_with_an_exif_orientation_gives_torchs_stored_pixels_or_is_refused(tmp_path, orientation):
    """torch's ``ImageFolder`` gives the pixels as stored (40 x 24 turned 90 degrees: 24 x 40); gpupipe gave
    them upright (40 x 24) for the same dataset, silently, and now reads them as stored
    (``tests/test_redteam_exif8.py``: every orientation, every backend)."""
    image = textured_image(np.random.default_rng(1), 40, 24)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "turned.png").write_bytes(turned_png(image, orientation, before=True))
    dataset = ImageFolder(str(tmp_path), T2.Compose([T2.PILToTensor()]))
    _torchs_or_refused(dataset, "turned.png")


def test_a_16_bit_grey_png_gives_torchs_pixels_or_is_refused(tmp_path):
    """torch's ``ImageFolder`` (``convert("RGB")`` of an ``I;16`` image) gives 255 wherever the value passes
    255; gpupipe gave the high byte (up to 254 levels apart), silently. The ``torchvision`` backend now reads
    it as PIL does (the ``dali`` backends warn naming it: ``tests/test_redteam_exif8.py``)."""
    (tmp_path / "a").mkdir()
    values = np.random.default_rng(2).integers(256, 65536, (16, 16)).astype(np.uint16)
    Image.fromarray(values).save(tmp_path / "a" / "deep.png")
    dataset = ImageFolder(str(tmp_path), T2.Compose([T2.PILToTensor()]))
    _torchs_or_refused(dataset, "deep.png")


# --- 5. the reference recipe's preset objects themselves: a class whose __call__ is `return self.transforms(img)`


class ClassificationPresetTrain:
    """As references/classification/presets.py writes it: a plain class holding a ``Compose``."""

    def __init__(self, *, crop_size, auto_augment_policy="ta_wide", backend="pil", use_v2=False):
        self.transforms = train_preset(T2 if use_v2 else T1, auto_augment_policy, backend, use_v2)

    def __call__(self, img):
        return self.transforms(img)


class ClassificationPresetEval:
    def __init__(self, *, crop_size, resize_size, backend="pil", use_v2=False):
        self.transforms = eval_preset(T2 if use_v2 else T1, backend, use_v2)

    def __call__(self, img):
        return self.transforms(img)


class PresetModule(torch.nn.Module):
    """The same as an ``nn.Module`` (a v2 ``Compose`` kept in ``_modules``), ``forward`` delegating."""

    def __init__(self):
        super().__init__()
        self.transforms = eval_preset(T2, "tensor", True)

    def forward(self, img):
        return self.transforms(img)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("preset", [ClassificationPresetEval, PresetModule])
def test_the_reference_eval_preset_object_gives_torchs_batches(root, backend, preset):
    """Before: ``UnsupportedTransform: ClassificationPresetEval: not a torchvision or timm transform`` for the
    reference script's ``ImageFolder(valdir, presets.ClassificationPresetEval(...))``. Now: it compiles as the
    ``Compose`` it calls, with torch's batches."""
    is_class = preset is ClassificationPresetEval
    transform = ClassificationPresetEval(crop_size=32, resize_size=36) if is_class else preset()
    dataset = ImageFolder(root, transform)
    assert gpupipe.from_torchvision(transform) == gpupipe.from_torchvision(transform.transforms)
    want, want_labels = theirs(dataset)
    images, labels = ours(dataset, backend)
    assert images.shape == want.shape and images.dtype == want.dtype and torch.equal(labels, want_labels)
    diff = (images - want).abs() * torch.tensor(STD).view(1, 3, 1, 1) * 255
    assert float(diff.mean()) <= 0.6 and float(diff.max()) <= 2.5


@pytest.mark.parametrize("policy", list(POLICY_OPS) + ["augmix"])
def test_the_reference_train_preset_object_compiles_or_is_refused_naming_the_transform_inside(policy):
    preset = ClassificationPresetTrain(crop_size=32, auto_augment_policy=policy, use_v2=True)
    if policy == "augmix":
        with pytest.raises(UnsupportedTransform, match=r"ClassificationPresetTrain\.transforms\[2\] AugMix: "):
            gpupipe.from_torchvision(preset)
    else:
        assert gpupipe.from_torchvision(preset) == gpupipe.from_torchvision(preset.transforms)


def test_a_preset_object_changed_after_the_loader_was_built_is_refused_at_the_next_pass(root):
    preset = ClassificationPresetEval(crop_size=32, resize_size=36)
    train = gpupipe.DataLoader(ImageFolder(root, preset), batch_size=3, backend="torchvision")
    assert len(list(train)) == 2
    preset.transforms = eval_preset(T1, "tensor", False)  # another Compose: still Resize(36) + CenterCrop(32)
    assert len(list(train)) == 2
    preset.transforms.transforms[1].size = [40]  # progressive resizing in place
    with pytest.raises(UnsupportedTransform, match=r"changed after the loader was built"):
        list(train)


class Twice:
    def __init__(self):
        self.transforms = T1.Compose([T1.ToTensor()])

    def __call__(self, img):
        return [self.transforms(img), self.transforms(img)]


class Shifted:
    def __init__(self):
        self.transforms = T1.Compose([T1.ToTensor()])

    def __call__(self, img):
        return self.transforms(img) + 1


class CallsItsMethod:
    def transforms(self, img):
        return T1.ToTensor()(img)

    def __call__(self, img):
        return self.transforms(img)


class HoldsALambda:
    def __init__(self):
        self.transforms = lambda img: img

    def __call__(self, img):
        return self.transforms(img)


def _hooked():
    module = PresetModule()
    module.register_forward_hook(lambda *args: None)
    return module


@pytest.mark.parametrize(
    "make, named",
    [
        (Twice, "Twice: not a torchvision"),
        (Shifted, "Shifted: not a torchvision"),
        (CallsItsMethod, "CallsItsMethod: not a torchvision"),
        (HoldsALambda, "HoldsALambda.transforms function: not a torchvision"),
        (_hooked, "PresetModule: not a torchvision"),
    ],
)
def test_a_wrapper_that_does_more_than_call_its_transform_is_still_refused_by_name(root, make, named):
    with pytest.raises(UnsupportedTransform, match=re.escape(named)):
        gpupipe.DataLoader(ImageFolder(root, make()), batch_size=3)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_the_reference_train_preset_object_gives_torchs_shapes_dtypes_labels_and_ranges(root, backend):
    dataset = ImageFolder(root, ClassificationPresetTrain(crop_size=32, auto_augment_policy="ta_wide", use_v2=True))
    want, want_labels = theirs(dataset)
    images, labels = ours(dataset, backend)
    assert images.shape == want.shape == (6, 3, 32, 32) and images.dtype == want.dtype == F32
    assert torch.equal(labels, want_labels)
    low = (0 - torch.tensor(MEAN)) / torch.tensor(STD)
    high = (1 - torch.tensor(MEAN)) / torch.tensor(STD)
    per_channel = images.transpose(0, 1).flatten(1)
    assert (per_channel.min(1).values >= low - 1e-4).all() and (per_channel.max(1).values <= high + 1e-4).all()


# --- 6. convert("RGB") as a function or a Lambda (CLIP's _convert_image_to_rgb, many scripts' Lambda) -------


def _convert_image_to_rgb(image):
    return image.convert("RGB")


def _to_grey(image):
    return image.convert("L")


@pytest.mark.parametrize(
    "step", [T1.Lambda(lambda x: x.convert("RGB")), T2.Lambda(lambda img: img.convert("RGB")), _convert_image_to_rgb]
)
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_convert_to_rgb_function_on_the_pil_image_compiles_to_nothing_with_torchs_batches(root, step, backend):
    """Before: ``Compose[0] Lambda: a user function`` refused the swap; the PIL loader's images are RGB already,
    so the function changes nothing, and gpupipe's decode gives the same RGB pixels."""
    transform = T1.Compose([step, T1.Resize((24, 24)), T1.PILToTensor()])
    assert gpupipe.from_torchvision(transform) == gpupipe.from_torchvision(T1.Compose(transform.transforms[1:]))
    dataset = ImageFolder(root, transform)
    want, want_labels = theirs(dataset)
    images, labels = ours(dataset, backend)
    assert images.shape == want.shape and images.dtype == want.dtype == torch.uint8
    assert torch.equal(labels, want_labels) and float((images.float() - want.float()).abs().mean()) <= 0.6


@pytest.mark.parametrize(
    "transform, named",
    [
        (T1.Compose([T1.Lambda(_to_grey), T1.ToTensor()]), "Compose[0] Lambda: a user function"),
        (T1.Compose([T1.Lambda(lambda x: x.convert("RGBA")), T1.ToTensor()]), "Compose[0] Lambda: a user function"),
        (T1.Compose([T1.ToTensor(), _convert_image_to_rgb]), "Compose[1] function: not a torchvision"),  # a tensor
    ],
)
def test_a_function_that_converts_otherwise_or_a_tensor_is_still_refused(transform, named):
    with pytest.raises(UnsupportedTransform, match=re.escape(named)):
        gpupipe.from_torchvision(transform)
