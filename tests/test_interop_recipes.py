"""Issue 33: the recipes people use compile: torchvision's classification reference presets (every
configuration), timm's create_transform at the usual settings; random recipes draw as torchvision draws."""

import math

import numpy as np
import pytest
import torch
from torchvision import transforms as T1
from torchvision.transforms import InterpolationMode
from torchvision.transforms import v2 as T2

from gpupipe import ops as O
from gpupipe.interop import UnsupportedTransform, from_torchvision
from gpupipe.plan import Planner
from gpupipe.plan.spec import build_spec

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def reference_train(*, crop_size=176, auto_augment_policy=None, random_erase_prob=0.0, backend="pil", use_v2=False,
                    ra_magnitude=9, augmix_severity=3, hflip_prob=0.5):
    """``ClassificationPresetTrain`` of torchvision's references/classification/presets.py, as it builds it."""
    T = T2 if use_v2 else T1
    interpolation = InterpolationMode.BILINEAR
    transforms = []
    if backend == "tensor":
        transforms.append(T.PILToTensor())
    transforms.append(T.RandomResizedCrop(crop_size, interpolation=interpolation, antialias=True))
    if hflip_prob > 0:
        transforms.append(T.RandomHorizontalFlip(hflip_prob))
    if auto_augment_policy is not None:
        if auto_augment_policy == "ra":
            transforms.append(T.RandAugment(interpolation=interpolation, magnitude=ra_magnitude))
        elif auto_augment_policy == "ta_wide":
            transforms.append(T.TrivialAugmentWide(interpolation=interpolation))
        elif auto_augment_policy == "augmix":
            transforms.append(T.AugMix(interpolation=interpolation, severity=augmix_severity))
        else:
            transforms.append(T.AutoAugment(policy=T.AutoAugmentPolicy(auto_augment_policy), interpolation=interpolation))
    if backend == "pil":
        transforms.append(T.PILToTensor())
    transforms.extend([
        T.ToDtype(torch.float, scale=True) if use_v2 else T.ConvertImageDtype(torch.float),
        T.Normalize(mean=MEAN, std=STD),
    ])
    if random_erase_prob > 0:
        transforms.append(T.RandomErasing(p=random_erase_prob))
    if use_v2:
        transforms.append(T.ToPureTensor())
    return T.Compose(transforms)


def reference_eval(*, crop_size=224, resize_size=256, backend="pil", use_v2=False):
    """``ClassificationPresetEval`` of the same file."""
    T = T2 if use_v2 else T1
    transforms = [T.PILToTensor()] if backend == "tensor" else []
    transforms += [T.Resize(resize_size, interpolation=InterpolationMode.BILINEAR, antialias=True),
                   T.CenterCrop(crop_size)]
    if backend == "pil":
        transforms.append(T.PILToTensor())
    transforms += [T.ToDtype(torch.float, scale=True) if use_v2 else T.ConvertImageDtype(torch.float),
                   T.Normalize(mean=MEAN, std=STD)]
    if use_v2:
        transforms.append(T.ToPureTensor())
    return T.Compose(transforms)


#: The presets pass interpolation=BILINEAR to every policy: the ops keep it (and the default fill, black).
POLICY_OPS = {None: [], "ra": [O.RandAugment(2, 9, interpolation="bilinear")],
              "ta_wide": [O.TrivialAugment(interpolation="bilinear")],
              "imagenet": [O.AutoAugment("imagenet", interpolation="bilinear")]}
CONFIGS = [(v2, be, aa, re) for v2 in (False, True) for be in ("pil", "tensor")
           for aa in (None, "ra", "ta_wide", "imagenet") for re in (0.0, 0.1)]


@pytest.mark.parametrize("use_v2, backend, policy, erase", CONFIGS)
def test_every_reference_train_preset_compiles_with_its_parameters(use_v2, backend, policy, erase):
    recipe = reference_train(auto_augment_policy=policy, random_erase_prob=erase, backend=backend, use_v2=use_v2)
    ops = from_torchvision(recipe)
    policy_ops = POLICY_OPS[policy]
    erasing = [O.RandomErasing(erase)] if erase else []
    assert ops == [O.Decode(), O.RandomResizedCrop(176), O.HorizontalFlip(0.5), *policy_ops, *erasing,
                   O.Normalize(MEAN, STD)]


@pytest.mark.parametrize("use_v2", [False, True])
@pytest.mark.parametrize("backend", ["pil", "tensor"])
def test_the_reference_eval_preset_compiles(use_v2, backend):
    assert from_torchvision(reference_eval(backend=backend, use_v2=use_v2)) == [
        O.Decode(), O.Resize(256), O.CenterCrop(224), O.Normalize(MEAN, STD)]


@pytest.mark.parametrize("use_v2", [False, True])
def test_augmix_is_refused_by_name(use_v2):
    with pytest.raises(UnsupportedTransform, match=r"Compose\[2\] AugMix: no gpupipe op"):
        from_torchvision(reference_train(auto_augment_policy="augmix", use_v2=use_v2))


# -- timm --------------------------------------------------------------------------------------

timm_data = pytest.importorskip("timm.data")


@pytest.mark.parametrize("color_jitter", [None, 0.4])
@pytest.mark.parametrize("re_prob", [0.0, 0.25])
def test_timm_train_transform_compiles(color_jitter, re_prob):
    recipe = timm_data.create_transform(224, is_training=True, interpolation="bilinear", color_jitter=color_jitter,
                                        re_prob=re_prob)
    jitter = [O.ColorJitter(0.4, 0.4, 0.4)] if color_jitter else []
    erasing = [O.RandomErasing(re_prob, scale=(0.02, 1 / 3), ratio=(0.3, math.exp(math.log(1 / 0.3))))] if re_prob else []
    ops = from_torchvision(recipe)
    assert ops[:3] == [O.Decode(), O.RandomResizedCrop(224), O.HorizontalFlip(0.5)]
    assert ops[3:-1] == [*jitter, *erasing]
    assert ops[-1].mean == pytest.approx(MEAN) and ops[-1].std == pytest.approx(STD)


def test_timm_eval_transform_compiles_with_its_crop_pct():
    ops = from_torchvision(timm_data.create_transform(224, is_training=False, interpolation="bilinear"))
    assert ops[:3] == [O.Decode(), O.Resize(256), O.CenterCrop(224)]
    assert ops[3].mean == pytest.approx(MEAN) and ops[3].std == pytest.approx(STD) and len(ops) == 4


@pytest.mark.parametrize(
    "kwargs, where, reason",
    [
        ({"is_training": True, "interpolation": "random"}, r"Compose\[0\] RandomResizedCropAndInterpolation",
         "interpolation='random'"),
        ({"is_training": True, "interpolation": "bicubic"}, r"Compose\[0\] RandomResizedCropAndInterpolation",
         "bilinear only"),
        ({"is_training": False, "interpolation": "bicubic"}, r"Compose\[0\] Resize", "BICUBIC"),
        ({"is_training": True, "auto_augment": "rand-m9-mstd0.5-inc1"}, r"Compose\[2\] RandAugment",
         "timm's RandAugment differs"),
        ({"is_training": True, "re_prob": 0.25, "re_mode": "pixel"}, r"RandomErasing", "mode='pixel'"),
    ],
)
def test_timm_settings_whose_meaning_gpupipe_cannot_keep_are_refused_by_name(kwargs, where, reason):
    with pytest.raises(UnsupportedTransform, match=f"{where}: .*{reason}"):
        from_torchvision(timm_data.create_transform(224, **kwargs))


# -- random recipes draw as torchvision draws (two-sample KS, 2,000 draws) ---------------------

stats = pytest.importorskip("scipy.stats")
DRAWS, H, W = 2000, 300, 400


def planned(recipe, index):
    """The parameters gpupipe plans for op ``index`` of the compiled ``recipe`` over ``DRAWS`` images."""
    spec = build_spec(from_torchvision(recipe))
    sizes = np.tile([H, W], (DRAWS, 1))
    return Planner(spec, seed=5).plan(0, np.arange(DRAWS), sizes).steps[index]


def test_random_resized_crop_area_and_aspect_ratio_are_distributed_as_torchvision():
    crop = T1.RandomResizedCrop(224, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3))
    p = planned(T1.Compose([crop, T1.ToTensor()]), 1)
    torch.manual_seed(0)
    image = torch.zeros(3, H, W)
    theirs = np.array([crop.get_params(image, crop.scale, crop.ratio)[2:] for _ in range(DRAWS)], np.float64)
    ours = np.stack([p["height"], p["width"]], 1).astype(np.float64)
    assert stats.ks_2samp(ours.prod(1) / (H * W), theirs.prod(1) / (H * W)).pvalue > 0.01, "crop area"
    assert stats.ks_2samp(ours[:, 1] / ours[:, 0], theirs[:, 1] / theirs[:, 0]).pvalue > 0.01, "aspect ratio"


def test_flip_and_erase_rates_are_distributed_as_torchvision():
    flip, erase = T1.RandomHorizontalFlip(0.3), T1.RandomErasing(0.4)
    recipe = T1.Compose([T1.CenterCrop((H, W)), flip, T1.ToTensor(), T1.Normalize(MEAN, STD), erase])
    flips = planned(recipe, 2)["flip"].astype(np.float64)
    erased = planned(recipe, 3)
    torch.manual_seed(1)
    ones = torch.ones(3, H, W)
    their_flips = np.array([float(not torch.equal(flip(ones[:, :, :1] * torch.arange(W)), ones[:, :, :1]
                                                  * torch.arange(W))) for _ in range(DRAWS)])
    their_erase = []
    for _ in range(DRAWS):
        done = torch.rand(1).item() < erase.p
        i, j, h, w, _ = erase.get_params(ones, scale=erase.scale, ratio=erase.ratio, value=[0.0])
        their_erase.append(h * w / (H * W) if done else 0.0)
    their_erase = np.array(their_erase)
    our_erase = np.where(erased["erase"] == 1, erased["height"] * erased["width"] / (H * W), 0.0)
    assert stats.ks_2samp(flips, their_flips).pvalue > 0.01, "flip rate"
    assert stats.ks_2samp((our_erase > 0).astype(float), (their_erase > 0).astype(float)).pvalue > 0.01, "erase rate"
    assert stats.ks_2samp(our_erase[our_erase > 0], their_erase[their_erase > 0]).pvalue > 0.01, "erased area"
