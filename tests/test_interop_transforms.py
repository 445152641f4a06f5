"""Issue 33: torchvision (v1, v2) and timm transforms compile to gpupipe ops with their meaning, or are
refused all at once, by position and reason."""

import pytest
import torch
from torchvision import transforms as T
from torchvision.transforms import InterpolationMode, v2

import gpupipe
from gpupipe import ops as O
from gpupipe.interop import UnsupportedTransform, from_torchvision, supported_names

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
NEW_OPS = {name: getattr(O, name) for name in ("VerticalFlip", "RandomAffine", "AutoAugment")}


@pytest.mark.parametrize("T", [T, v2], ids=["v1", "v2"])
def test_the_eval_recipe_compiles_to_the_val_preset(T):
    to_float = [T.ToTensor()] if T is not v2 else [v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]
    recipe = T.Compose([T.Resize(256), T.CenterCrop(224), *to_float, T.Normalize(MEAN, STD)])
    assert from_torchvision(recipe) == gpupipe.presets.val()


@pytest.mark.parametrize("T", [T, v2], ids=["v1", "v2"])
def test_the_train_recipe_keeps_every_parameter(T):
    recipe = T.Compose([
        T.RandomResizedCrop(176, scale=(0.25, 0.9), ratio=(0.5, 2.0)),
        T.RandomHorizontalFlip(0.3),
        T.ColorJitter(0.4, 0.3, 0.2),
        T.RandomGrayscale(0.15),
        T.GaussianBlur(7, sigma=(0.2, 1.5)),
        T.TrivialAugmentWide(num_magnitude_bins=21),
        T.RandAugment(num_ops=3, magnitude=5, num_magnitude_bins=11),
        T.ToTensor() if T is not v2 else v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]),
        T.Normalize((0.5, 0.4, 0.3), (0.2, 0.3, 0.4)),
        T.RandomErasing(0.2, scale=(0.05, 0.3), ratio=(0.5, 2.0)),
    ])
    assert from_torchvision(recipe) == [
        O.Decode(),
        O.RandomResizedCrop(176, scale=(0.25, 0.9), ratio=(0.5, 2.0)),
        O.HorizontalFlip(0.3),
        O.ColorJitter((0.6, 1.4), (0.7, 1.3), (0.8, 1.2)),
        O.RandomGrayscale(0.15),
        O.GaussianBlur(7, (0.2, 1.5)),
        O.TrivialAugment(num_magnitude_bins=21),
        O.RandAugment(3, 5, num_magnitude_bins=11),
        O.RandomErasing(0.2, scale=(0.05, 0.3), ratio=(0.5, 2.0)),
        O.Normalize((0.5, 0.4, 0.3), (0.2, 0.3, 0.4)),
    ]


def test_output_contract_follows_the_transforms_last_tensor():
    assert from_torchvision(T.Compose([T.CenterCrop(8), T.ToTensor()])) == [O.Decode(), O.CenterCrop(8)], (
        "ToTensor without Normalize: float in [0, 1], gpupipe's output without Normalize"
    )
    assert from_torchvision(T.Compose([T.CenterCrop(8), T.PILToTensor()]))[-1] == O.Output("uint8")
    assert from_torchvision(v2.Compose([v2.CenterCrop(8), v2.ToImage()]))[-1] == O.Output("uint8")
    half = v2.Compose([v2.ToImage(), v2.CenterCrop(8), v2.ToDtype(torch.float16, scale=True)])
    assert from_torchvision(half)[-1] == O.Output("float16")
    assert from_torchvision(T.Compose([T.PILToTensor(), T.CenterCrop(8), T.ConvertImageDtype(torch.float)])) == [
        O.Decode(),
        O.CenterCrop(8),
    ]


def test_random_apply_and_nesting():
    recipe = T.Compose([
        T.Compose([T.CenterCrop(16)]),
        T.RandomApply([T.RandomHorizontalFlip(0.5)], p=0.5),
        T.RandomApply([T.Grayscale(3)], p=0.2),
        T.RandomApply([T.ColorJitter(0.1)], p=1.0),
        T.RandomApply([T.GaussianBlur(3)], p=0.0),
        T.ToTensor(),
    ])
    assert from_torchvision(recipe) == [
        O.Decode(),
        O.CenterCrop(16),
        O.HorizontalFlip(0.25),
        O.RandomGrayscale(0.2),
        O.ColorJitter(0.1),
    ]
    assert from_torchvision(T.Compose([T.CenterCrop(4), T.RandomHorizontalFlip(1.0), T.ToTensor()]))[2] == (
        O.HorizontalFlip(1.0)
    ), "a single transform keeps its p"
    assert from_torchvision(T.RandomResizedCrop(8)) == [O.Decode(), O.RandomResizedCrop(8)], (
        "one transform alone: a PIL image at the end gives what ToTensor would"
    )


def test_everything_that_cannot_be_compiled_is_named_at_once_with_its_position_and_reason():
    recipe = T.Compose([
        T.RandomResizedCrop(224, interpolation=InterpolationMode.BICUBIC),  # 0
        T.Lambda(lambda x: x),  # 1
        T.RandomRotation(10),  # 2: NEAREST by default
        T.Compose([T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8)]),  # 3
        T.RandomCrop(200, padding=4),  # 4
        T.AugMix(),  # 5
        T.Grayscale(),  # 6: one channel
        T.ToTensor(),
        T.Resize(100, antialias=False),  # 8: on a tensor
    ])
    with pytest.raises(gpupipe.Error) as caught:
        from_torchvision(recipe)
    err = caught.value
    assert isinstance(err, UnsupportedTransform) and isinstance(err, ValueError)
    assert [(where, name) for where, name, _ in err.problems] == [
        ("Compose[0]", "RandomResizedCrop"),
        ("Compose[1]", "Lambda"),
        ("Compose[2]", "RandomRotation"),
        ("Compose[3][0][0]", "ColorJitter"),
        ("Compose[4]", "RandomCrop"),
        ("Compose[5]", "AugMix"),
        ("Compose[6]", "Grayscale"),
        ("Compose[8]", "Resize"),
    ]
    text = str(err)
    for piece in ("BICUBIC", "user function", "NEAREST", "random order", "padding", "AugMix", "3 channels",
                  "antialias=False", "supported: ", "RandomResizedCrop"):
        assert piece in text, piece


@pytest.mark.parametrize(
    "recipe, reason",
    [
        (T.Compose([T.CenterCrop(8), T.ToTensor(), T.RandomErasing(), T.Normalize(MEAN, STD)]), "after Normalize"),
        (T.Compose([T.CenterCrop(8), T.ToTensor(), T.Normalize(MEAN, STD), T.CenterCrop(4)]), "after Normalize"),
        (v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32), v2.ColorJitter(0.4)]), "scale=False"),
        (T.Compose([T.CenterCrop(8), T.Normalize(MEAN, STD)]), "needs a float tensor"),
        (T.Compose([T.CenterCrop(8), T.ToTensor(), T.RandomErasing(value="random")]), "value='random'"),
        (T.Compose([T.RandomRotation(5, interpolation=InterpolationMode.BILINEAR, fill=3), T.CenterCrop(4),
                    T.ToTensor()]), "fill=3"),
        (T.Compose([T.CenterCrop(8), T.GaussianBlur((3, 5)), T.ToTensor()]), "square kernel"),
        (T.Compose([T.Resize(8), T.RandomCrop(6, pad_if_needed=True), T.ToTensor()]), "pad_if_needed"),
        (T.Compose([T.CenterCrop(8), T.RandomApply([T.GaussianBlur(3)], p=0.5), T.ToTensor()]), "p=0.5 around"),
        (T.Compose([T.RandomChoice([T.CenterCrop(8)]), T.ToTensor()]), "random choice"),
    ],
)
def test_meanings_gpupipe_cannot_keep_are_refused(recipe, reason):
    with pytest.raises(UnsupportedTransform, match=reason):
        from_torchvision(recipe)


def test_what_keeps_its_meaning_on_pil_images_compiles():
    assert from_torchvision(T.Compose([T.Resize(8, antialias=False), T.CenterCrop(8), T.ToTensor()]))[1] == (
        O.Resize(8)
    ), "antialias=False does nothing to a PIL image (PIL always antialiases)"
    rotate = T.RandomRotation((-5, 7), interpolation=InterpolationMode.BILINEAR)
    assert from_torchvision(T.Compose([T.CenterCrop(8), rotate, T.ToTensor()]))[2] == O.RandomRotation((-5, 7))
    assert from_torchvision(T.Compose([T.Resize(8, max_size=12), T.CenterCrop(8), T.ToTensor()]))[1] == (
        O.Resize(8, max_size=12)
    )


def test_a_foreign_object_is_named():
    class Mine:
        def __call__(self, x):
            return x

    with pytest.raises(UnsupportedTransform, match=r"Compose\[1\] Mine: not a torchvision or timm transform"):
        from_torchvision(T.Compose([T.CenterCrop(8), Mine(), T.ToTensor()]))


def test_supported_list_names_the_issues_transforms():
    names = set(supported_names())
    for name in ("Resize", "CenterCrop", "RandomCrop", "RandomResizedCrop", "RandomHorizontalFlip",
                 "RandomVerticalFlip", "ColorJitter", "RandomGrayscale", "Grayscale", "GaussianBlur",
                 "RandomRotation", "RandomAffine", "RandAugment", "TrivialAugmentWide", "AutoAugment",
                 "RandomErasing", "RandomApply", "ToTensor", "PILToTensor", "ToImage", "ToDtype",
                 "ConvertImageDtype", "Normalize", "Compose"):
        assert name in names, name
    assert "timm.RandAugment" not in names and "AugMix" not in names


def test_vertical_flip_compiles():
    ops = from_torchvision(T.Compose([T.CenterCrop(8), T.RandomVerticalFlip(0.3), T.ToTensor()]))
    assert ops[2] == NEW_OPS["VerticalFlip"](0.3)


def test_imagenet_auto_augment_compiles_and_other_policies_are_refused():
    ops = from_torchvision(T.Compose([T.CenterCrop(8), T.AutoAugment(interpolation=InterpolationMode.BILINEAR, fill=4),
                                      T.ToTensor()]))
    assert ops[2] == NEW_OPS["AutoAugment"]("imagenet", interpolation="bilinear", fill=4)
    assert from_torchvision(v2.Compose([v2.CenterCrop(8), v2.AutoAugment(), v2.ToImage()]))[2] == (
        NEW_OPS["AutoAugment"]()
    )
    with pytest.raises(UnsupportedTransform, match="policy=CIFAR10"):
        from_torchvision(T.Compose([T.CenterCrop(8), T.AutoAugment(T.AutoAugmentPolicy.CIFAR10), T.ToTensor()]))


@pytest.mark.parametrize("T", [T, v2], ids=["v1", "v2"])
def test_random_affine_compiles_with_its_parameters(T):
    affine = T.RandomAffine(10, translate=(0.1, 0.2), scale=(0.9, 1.1), shear=5,
                            interpolation=InterpolationMode.BILINEAR, fill=(1, 2, 3), center=(3, 4))
    ops = from_torchvision(T.Compose([T.CenterCrop(8), affine, T.ToTensor() if T is not v2 else v2.ToImage()]))
    assert ops[2] == NEW_OPS["RandomAffine"]((-10, 10), (0.1, 0.2), (0.9, 1.1), 5, interpolation="bilinear",
                                             fill=(1, 2, 3), center=(3, 4))
    default = from_torchvision(T.Compose([T.CenterCrop(8), T.RandomAffine(0), T.PILToTensor()]))[2]
    assert default == NEW_OPS["RandomAffine"](0), "nearest and black, torchvision's defaults"
