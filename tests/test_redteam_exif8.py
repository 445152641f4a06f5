"""Red team (exif8): the swap reads photos as torchvision's PIL loader does, as stored.

torchvision's ``ImageFolder`` opens each file with PIL and ``convert("RGB")``, which leaves a phone photo's EXIF
orientation unapplied (a photo tagged 6 comes sideways). ``gpupipe.DataLoader`` given that dataset must give the
same pixels (every orientation, JPEG and PNG ``eXIf``), plan its crops on the stored sizes, on every backend;
``gpupipe.loader(folder)`` keeps reading them upright. Each compared with torch's own ``DataLoader``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from decode_quirks import STORED, encoded, exif
from helpers import BACKEND_DEVICES, CPU_BACKENDS, DECODE_TOLERANCE, needs_dali, textured_image
from PIL import Image
from torchvision import transforms as T1
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2 as T2

import gpupipe
from gpupipe import ops
from gpupipe.sources import FileList
from gpupipe.sources.scan import GREY16, TURNED, scan

#: The displayed scene of every file: 40 high, 24 wide (stored turned where the orientation turns it).
SHOWN = textured_image(np.random.default_rng(8), 40, 24)


def photo(path, orientation: int, fmt: str, shown: np.ndarray = SHOWN) -> None:
    """``shown`` written as a camera writes it: the pixels stored turned, tagged with the ``orientation``
    that turns them upright again (1: untagged)."""
    stored = Image.fromarray(shown)
    if orientation != 1:
        stored = stored.transpose(STORED[orientation])
    save = {"exif": exif(orientation)} if orientation != 1 else {}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encoded(stored, fmt, **({"quality": 95} if fmt == "JPEG" else {}), **save))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Orientations 1 to 8 as PNG (class ``png``) and as JPEG (class ``jpg``)."""
    root = tmp_path_factory.mktemp("exif8") / "data"
    for orientation in range(1, 9):
        photo(root / "png" / f"o{orientation}.png", orientation, "PNG")
        photo(root / "jpg" / f"o{orientation}.jpg", orientation, "JPEG")
    return root


def ours(dataset, backend, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = gpupipe.DataLoader(dataset, batch_size=len(dataset), backend=backend, **kwargs)
        images, labels = next(iter(loader))
    return images.cpu(), labels.cpu()


def theirs_each(dataset):
    """torch's images one by one (stored sizes differ where the orientation turns them)."""
    return [dataset[i][0] for i in range(len(dataset))]


def assert_as_torch(got: torch.Tensor, want: torch.Tensor, path: str, jpeg: bool, tolerance: float = 0.5):
    """Equal for a PNG (lossless); a JPEG within the CPU decode tolerance (both libjpeg-turbo)."""
    assert got.shape == want.shape, f"{path}: {tuple(got.shape)} where torch gives {tuple(want.shape)}"
    diff = (got.float() - want.float()).abs()
    if jpeg:
        assert diff.mean() <= tolerance * (255 if got.dtype == torch.uint8 else 1) / 255, path
    else:
        assert diff.max() <= (0 if got.dtype == torch.uint8 else 1e-6), path


@pytest.mark.parametrize("backend, device", BACKEND_DEVICES)
@pytest.mark.parametrize("fmt", ["png", "jpg"])
def test_every_orientation_gives_torchs_stored_pixels(folder, backend, device, fmt):
    """Orientations 1 to 8 at their stored size (40 x 24, or 24 x 40 for 5 to 8): before the fix gpupipe gave
    each upright (40 x 24), that is other pixels than torch's for 2 to 8 and a refusal to batch. On a GPU
    (``dali``: nvImageCodec's decoders) a JPEG within the GPU's decode tolerance."""
    dataset = ImageFolder(
        str(folder), T2.Compose([T2.PILToTensor()]), is_valid_file=lambda p: p.endswith(fmt), allow_empty=True
    )
    want = theirs_each(dataset)
    for k, (path, _) in enumerate(dataset.samples):
        single = torch.utils.data.Subset(dataset, [k])
        images, _ = ours(single, backend, device=device)
        assert_as_torch(images[0], want[k], path, fmt == "jpg", DECODE_TOLERANCE[device])


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
def test_resize_and_center_crop_follow_the_stored_sizes_as_torchs(folder, backend, v2):
    """The deterministic eval recipe on turned photos: sizes planned on the stored image, torch's batches."""
    T = T2 if v2 else T1
    transform = T.Compose([T.Resize(30), T.CenterCrop((28, 20)), T.ToTensor() if not v2 else T.ToImage()])
    if v2:
        transform = T2.Compose([transform, T2.ToDtype(torch.float32, scale=True)])
    dataset = ImageFolder(str(folder), transform, is_valid_file=lambda p: p.endswith(".png"), allow_empty=True)
    want, want_labels = next(iter(torch.utils.data.DataLoader(dataset, batch_size=len(dataset))))
    images, labels = ours(dataset, backend)
    assert torch.equal(labels, want_labels)
    for k, (path, _) in enumerate(dataset.samples):
        # (the resize itself: PIL's on the PIL image against gpupipe's; the orientation: all or nothing)
        assert images[k].shape == want[k].shape
        assert (images[k] - want[k]).abs().mean() < 0.02, path


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_random_resized_crop_is_planned_on_the_stored_image(tmp_path, backend):
    """The same stored pixels (96 x 160), untagged and tagged 3, 6 and 8, under a ``RandomResizedCrop`` whose only
    window is the whole stored image (scale 1, its aspect): torch gives one image four times, and so must
    gpupipe, through its reduced (torchvision) and ROI (DALI) decodes. Planned on the upright size (160 x 96)
    the window would not fit, and the decode would turn it."""
    stored = textured_image(np.random.default_rng(3), 96, 160)
    names = {1: "plain", 3: "t3", 6: "t6", 8: "t8"}
    for orientation, name in names.items():
        save = {"exif": exif(orientation)} if orientation != 1 else {}
        (tmp_path / "a").mkdir(exist_ok=True)
        (tmp_path / "a" / f"{name}.jpg").write_bytes(encoded(Image.fromarray(stored), "JPEG", quality=95, **save))
    crop = T1.RandomResizedCrop((12, 20), scale=(1.0, 1.0), ratio=(5 / 3, 5 / 3), antialias=True)
    dataset = ImageFolder(str(tmp_path), T1.Compose([crop, T1.ToTensor()]))
    images, _ = ours(dataset, backend)
    for k, (path, _) in enumerate(dataset.samples):
        assert torch.equal(images[k], images[0]), path  # as the untagged file: the same bytes of pixels
        assert_as_torch(images[k], dataset[k][0], path, True, tolerance=16.0)  # (a reduced decode: within 16)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_gpupipes_own_loader_of_the_folder_still_reads_upright(folder, backend):
    """``gpupipe.loader(folder)`` is gpupipe's own reading: upright (EXIF applied), whichever read the folder
    first (the scan cache on disk is shared; each source sizes its images its own way)."""
    swapped = ImageFolder(
        str(folder), T2.Compose([T2.PILToTensor()]), is_valid_file=lambda p: "o6." in p, allow_empty=True
    )
    first, _ = ours(swapped, backend)
    assert first.shape[-2:] == (24, 40)  # as stored
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        own = gpupipe.loader(
            str(folder),
            batch_size=16,
            shuffle=False,
            backend=backend,
            pipeline=[ops.Decode(), ops.CenterCrop((40, 24))],
            dtype=torch.uint8,
        )
        images, labels = next(iter(own))
    assert images.shape[-2:] == (40, 24)
    png = [k for k, name in enumerate(own.dataset.samples) if name[0].endswith(".png")]
    for k in png:
        assert torch.equal(images[k].cpu(), torch.from_numpy(SHOWN).permute(2, 0, 1)), own.dataset.samples[k][0]


def test_the_scan_records_which_images_turn_and_each_source_reads_its_sizes(folder):
    """The scan (and its cache) keep the upright size and whether the orientation turned it; a source reading
    as stored swaps them back."""
    paths = sorted(str(p) for p in folder.rglob("*.png"))
    cold = scan(paths, max_pixels=1 << 30, max_file_size=1 << 30, cache_dir=folder.parent / "cache")
    warm = scan(paths, max_pixels=1 << 30, max_file_size=1 << 30, cache_dir=folder.parent / "cache")
    for result in (cold, warm):
        assert result.sizes.tolist() == [[40, 24]] * 8
        assert result.has(TURNED).tolist() == [o in (5, 6, 7, 8) for o in range(1, 9)] and not result.has(GREY16).any()
    stored = FileList([(p, 0) for p in paths], classes=["a"])
    stored.decode_as = "stored"
    assert stored.sizes().tolist() == [[24, 40] if o >= 5 else [40, 24] for o in range(1, 9)]
    assert stored.subset([5, 0]).sizes().tolist() == [[24, 40], [40, 24]]
    assert FileList([(p, 0) for p in paths], classes=["a"]).sizes().tolist() == [[40, 24]] * 8


@needs_dali
@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "mixed"])
def test_the_dali_decoders_full_and_roi_alike_take_the_sources_reading(gpu):
    """``dali`` on a GPU (``device="mixed"``) gets the same ``adjust_orientation`` as ``dali-cpu``, for the full
    decode and the ROI decode of a fused ``RandomResizedCrop`` (checked here without a GPU: the arguments)."""
    from gpupipe.backends.dali.decoder import DecoderSettings, decoder_kwargs
    from gpupipe.backends.dali.lowering import roi_decoder

    for decode_as, adjust in (("upright", True), ("stored", False)):
        kwargs = decoder_kwargs(gpu, DecoderSettings(hw_decoder_load=0.65, decode_as=decode_as))
        assert kwargs["adjust_orientation"] is adjust and roi_decoder(kwargs)["adjust_orientation"] is adjust


@pytest.fixture
def deep(tmp_path):
    """A 16-bit grey PNG (values 0 to 65535: some under 256) beside an 8-bit one, in one class."""
    values = np.random.default_rng(16).integers(0, 65536, (16, 16)).astype(np.uint16)
    values[:4] = np.arange(64, dtype=np.uint16).reshape(4, 16)  # under 256: PIL keeps them
    Image.fromarray(values).save(tmp_path / "deep.png")
    (tmp_path / "a").mkdir()
    (tmp_path / "deep.png").rename(tmp_path / "a" / "deep.png")
    Image.fromarray(textured_image(np.random.default_rng(1), 16, 16)).save(tmp_path / "a" / "plain.png")
    return tmp_path, values


def test_a_16_bit_grey_png_in_the_swap_gives_torchs_pixels_on_torchvision(deep):
    """torch's ``convert("RGB")`` clamps each value above 255 to 255; the ``torchvision`` backend read it scaled
    (``v * 255 / 65535``) and now reads it as PIL does, without a warning."""
    root, values = deep
    dataset = ImageFolder(str(root), T2.Compose([T2.PILToTensor()]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        images, _ = next(iter(gpupipe.DataLoader(dataset, batch_size=2, backend="torchvision")))
    want = torch.stack(theirs_each(dataset))
    assert torch.equal(images, want)
    assert torch.equal(images[0, 0], torch.from_numpy(np.minimum(values, 255).astype(np.uint8)))


@needs_dali
def test_a_16_bit_grey_png_in_the_swap_on_dali_is_named_in_a_warning(deep):
    """DALI scales a 16-bit grey PNG to 8 bits, unlike PIL: the swap warns when the loader is built, naming the
    file and the difference (the 8-bit file is not named)."""
    root, values = deep
    dataset = ImageFolder(str(root), T2.Compose([T2.PILToTensor()]))
    with pytest.warns(UserWarning, match=r"1 16-bit grey PNG \(.*deep\.png\).*clamps") as caught:
        loader = gpupipe.DataLoader(dataset, batch_size=2, backend="dali-cpu")
        images, _ = next(iter(loader))
    assert not any("plain.png" in str(w.message) for w in caught)
    assert torch.equal(
        images[0, 0], torch.from_numpy(((values.astype(np.int64) * 255 + 32767) // 65535).astype(np.uint8))
    )


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_gpupipes_own_loader_still_scales_a_16_bit_grey_png_without_a_warning(deep, backend):
    """``gpupipe.loader(folder)`` reads it scaled to 8 bits on every backend alike, as before."""
    root, values = deep
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        own = gpupipe.loader(
            str(root),
            batch_size=2,
            shuffle=False,
            backend=backend,
            pipeline=[ops.Decode(), ops.CenterCrop(16)],
            dtype=torch.uint8,
        )
        images, _ = next(iter(own))
    assert torch.equal(
        images[0, 0].cpu(), torch.from_numpy(((values.astype(np.int64) * 255 + 32767) // 65535).astype(np.uint8))
    )
