"""The two DALI forms of the ops whose best lowering differs by device (``gpupipe.backends.dali.forms``):
the auto-augment policies' ``select`` (a conditional split per op, the ``"cpu"`` form) and fused chain
(every op on every sample, neutral where another was drawn, the ``"gpu"`` form) give the same images
from the same plan; the parameters the fused chain works
out on the host are each op's and neutral elsewhere; the form follows the device unless
``GPUPIPE_DALI_FORM`` names one."""

import numpy as np
import pytest
import torch

import gpupipe
from helpers import DALI_BACKEND_DEVICES, make_image_folder, needs_dali
from gpupipe.ops import (
    AUGMENT_OPS,
    AutoAugment,
    Decode,
    Output,
    RandAugment,
    RandomErasing,
    RandomResizedCrop,
    Resize,
    TrivialAugment,
)

pytestmark = needs_dali

SIZE = (40, 48)  # (h, w): not square, so that a rotation or translation mixing up h and w shows
SAMPLES = 240
POLICIES = {
    "randaugment": RandAugment(num_ops=2, magnitude=9),
    "randaugment-strongest-bilinear-grey": RandAugment(num_ops=1, magnitude=30, interpolation="bilinear",
                                                       fill=(128, 128, 128)),
    "trivial": TrivialAugment(),
    "autoaugment": AutoAugment(),
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("fused") / "data"
    make_image_folder(root, {"a": 12, "b": 12}, sizes=(60, 100), seed=4)
    return root


def images(folder, op, form, monkeypatch, device="cpu", before=(Resize(size=SIZE),)):
    """``SAMPLES`` outputs (several epochs), int ``(N, 3, H, W)`` uint8 levels, with ``op`` in ``form``."""
    monkeypatch.setenv("GPUPIPE_DALI_FORM", form)
    backend = "dali" if device == "cuda" else "dali-cpu"
    loader = gpupipe.loader(folder, [Decode(), *before, op, Output(dtype="uint8")], batch_size=24,
                            backend=backend, device=device, shuffle=False, seed=5, num_threads=1)
    out = []
    while sum(len(x) for x in out) < SAMPLES:
        out.extend(x.cpu().int() for x, _ in loader)
    return torch.cat(out)[:SAMPLES]


@pytest.mark.parametrize("backend, device", DALI_BACKEND_DEVICES)
@pytest.mark.parametrize("name", list(POLICIES))
def test_the_fused_form_gives_the_select_forms_images(folder, name, backend, device, monkeypatch):
    """240 samples x their levels draw every op many times: each sample's image must agree (float
    rounding may move a pixel by one level, on a GPU too), and the policy must have changed the images."""
    select = images(folder, POLICIES[name], "cpu", monkeypatch, device)
    fused = images(folder, POLICIES[name], "gpu", monkeypatch, device)
    diff = (select - fused).abs()
    assert diff.max() <= 1, (name, "largest difference", diff.max().item())
    assert (diff > 0).float().mean() < 1e-3, (name, "pixels that differ", (diff > 0).float().mean().item())
    plain = images(folder, RandAugment(num_ops=0), "cpu", monkeypatch, device)
    changed = (fused - plain).abs().flatten(1).amax(1) > 0
    assert changed.float().mean() > 0.5, (name, "samples the policy changed", changed.float().mean().item())


def params_for(op, level_ops, signs, bins=None):
    from gpupipe.backends.dali.augment_fused import host_params

    step = {"ops": np.array(level_ops, np.int32), "signs": np.array(signs, np.int32)}
    if bins is not None:
        step["bins"] = np.array(bins, np.int32)
    return host_params(op, step, SIZE)


def test_each_op_sets_its_own_parameter_and_leaves_the_others_neutral():
    ra = RandAugment(num_ops=1, magnitude=30)
    ops = [[AUGMENT_OPS.index(name)] for name in AUGMENT_OPS]
    p = params_for(ra, ops, [[0]] * len(ops))
    row = {name: k for k, name in enumerate(AUGMENT_OPS)}
    neutral = {"saturation0": 1.0, "scale0": 1.0, "contrast0": 1.0, "autocontrast0": 0.0, "threshold0": 256.0,
               "posterize0": 255, "equalize0": 0}
    touches = {"Color": {"saturation0"}, "Brightness": {"scale0"}, "Contrast": {"contrast0", "scale0"},
               "AutoContrast": {"autocontrast0"}, "Solarize": {"threshold0"}, "Posterize": {"posterize0"},
               "Equalize": {"equalize0"}}
    geometric = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"}
    for name, k in row.items():
        for key, value in neutral.items():
            if key not in touches.get(name, set()):
                assert p[key][k] == value, (name, key, p[key][k])
        assert np.array_equal(p["matrix0"][k], np.eye(2, 3)) == (name not in geometric), name
        assert np.array_equal(p["kernel0"][k], np.pad([[1.0]], 1)) == (name != "Sharpness"), name
    # torchvision's magnitudes at bin 30 of 31: shear 0.3 (DALI leans the other way), 150/331 of the side,
    # 30 degrees, enhance 1.9, posterize to 4 bits, solarize at 0
    assert np.allclose(p["matrix0"][row["ShearX"]], [[1, -0.3, 0], [0, 1, 0]])
    assert np.allclose(p["matrix0"][row["ShearY"]], [[1, 0, 0], [-0.3, 1, 0]])
    assert np.allclose(p["matrix0"][row["TranslateX"]], [[1, 0, int(150 / 331 * SIZE[1])], [0, 1, 0]])
    assert np.allclose(p["matrix0"][row["TranslateY"]], [[1, 0, 0], [0, 1, int(150 / 331 * SIZE[0])]])
    assert np.isclose(p["scale0"][row["Brightness"]], 1.9) and np.isclose(p["contrast0"][row["Contrast"]], 1.9)
    assert np.isclose(p["scale0"][row["Contrast"]], 1.9)  # the scale is brightness times contrast
    assert p["posterize0"][row["Posterize"]] == 0b11110000 and p["threshold0"][row["Solarize"]] == 0.0
    assert p["autocontrast0"][row["AutoContrast"]] == 1.0 and p["equalize0"][row["Equalize"]] == 1


def test_a_rotation_turns_about_the_centre_and_a_negative_sign_turns_back():
    ra = RandAugment(num_ops=1, magnitude=30)
    rotate = AUGMENT_OPS.index("Rotate")
    p = params_for(ra, [[rotate], [rotate]], [[0], [1]])
    h, w = SIZE
    centre = np.array([w / 2, h / 2, 1.0])
    for m in p["matrix0"]:
        assert np.allclose(m @ centre, centre[:2], atol=1e-4)
        assert np.isclose(abs(np.degrees(np.arctan2(m[1, 0], m[0, 0]))), 30.0, atol=1e-3)
    forward, back = np.vstack([p["matrix0"][0], [0, 0, 1]]), np.vstack([p["matrix0"][1], [0, 0, 1]])
    assert np.allclose(forward @ back, np.eye(3), atol=1e-5)


def test_invert_is_a_solarize_at_zero_and_trivial_augment_reads_each_samples_bin():
    from gpupipe.ops.pixel import AUTO_AUGMENT_OPS

    aa = AutoAugment()
    invert = AUTO_AUGMENT_OPS.index("Invert")
    p = params_for(aa, [[invert, 0]], [[0, 0]], bins=[[0, 0]])
    assert p["threshold0"][0] == 0.0 and p["threshold1"][0] == 256.0
    ta = TrivialAugment()
    brightness = AUGMENT_OPS.index("Brightness")
    p = params_for(ta, [[brightness]] * 3, [[0], [0], [1]], bins=[0, 30, 30])
    assert np.allclose(p["scale0"], [1.0, 1.99, 0.01])


@pytest.mark.parametrize("backend, device", DALI_BACKEND_DEVICES)
@pytest.mark.parametrize("p", [1.0, 0.5])
def test_erasing_has_one_form_and_erases_the_share_of_samples_asked(folder, p, backend, device, monkeypatch):
    """``fn.erase`` on both devices (its mask form cost three times as much on an H200): the forms' variable
    changes nothing, and the planned rectangles are filled with the mean in a share ``p`` of the samples; a
    random crop before it, so that the rectangles differ in place and size from sample to sample."""
    crop = (RandomResizedCrop(size=SIZE),)
    erased_cpu = images(folder, RandomErasing(p=p), "cpu", monkeypatch, device, before=crop)
    erased_gpu = images(folder, RandomErasing(p=p), "gpu", monkeypatch, device, before=crop)
    assert torch.equal(erased_cpu, erased_gpu)
    # without Normalize the mean is 0: the rectangles are black (generated photos have few black pixels)
    filled = (erased_gpu == 0).all(dim=1).flatten(1).float().mean(1)
    plain = (images(folder, RandomErasing(p=0.0), "gpu", monkeypatch, device, before=crop) == 0).all(dim=1)
    assert plain.flatten(1).float().mean(1).max() < 0.01
    erased = (filled > 0.01).float().mean().item()
    assert abs(erased - p) < 0.15, (p, erased)


def test_the_form_follows_the_device_unless_the_variable_names_one(monkeypatch):
    from gpupipe.backends.dali.forms import graph_form, lowering_form
    from gpupipe.backends.dali.graph import uses_conditionals
    from gpupipe.plan.spec import build_spec

    monkeypatch.delenv("GPUPIPE_DALI_FORM", raising=False)
    assert (lowering_form(gpu=True), lowering_form(gpu=False)) == ("gpu", "cpu")
    monkeypatch.setenv("GPUPIPE_DALI_FORM", "cpu")
    assert lowering_form(gpu=True) == "cpu"
    monkeypatch.setenv("GPUPIPE_DALI_FORM", "GPU ")
    assert lowering_form(gpu=False) == "gpu"
    monkeypatch.setenv("GPUPIPE_DALI_FORM", "fused")
    with pytest.raises(ValueError, match="GPUPIPE_DALI_FORM='fused': expected one of gpu, cpu, torch"):
        lowering_form(gpu=True)
    monkeypatch.setenv("GPUPIPE_DALI_FORM", "torch")
    assert lowering_form(gpu=True) == "torch"
    # what the torch form leaves in DALI's graph takes the device's form
    assert (graph_form("torch", gpu=True), graph_form("torch", gpu=False), graph_form("cpu", gpu=True)) == (
        "gpu", "cpu", "cpu")
    spec = build_spec([Decode(), Resize(size=SIZE), RandAugment()])
    assert uses_conditionals(spec, "cpu") and not uses_conditionals(spec, "gpu")
