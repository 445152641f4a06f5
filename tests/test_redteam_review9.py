"""Red team (review9): fresh-eyes review of the session's library changes.

A source read as stored (``Source.decode_as="stored"``: the swap of a torchvision ``ImageFolder``, whose PIL loader
leaves a photo's EXIF orientation unapplied) packed with ``gpupipe.pack.pack`` must give the pack the pixels the
source reads, not upright ones; ``gpupipe``'s own folder source keeps packing upright.
"""

from __future__ import annotations

import io
import json
import tarfile
import warnings

import numpy as np
import pytest
import torch
from PIL import Image
from test_redteam_exif8 import SHOWN, photo
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2 as T2

import gpupipe
from gpupipe.pack import pack
from gpupipe.sources import ImageFolder as OwnFolder


@pytest.fixture
def phones(tmp_path):
    """Orientations 1 and 6 as JPEG, 6 as PNG (its eXIf chunk)."""
    root = tmp_path / "data"
    photo(root / "a" / "o1.jpg", 1, "JPEG")
    photo(root / "a" / "o6.jpg", 6, "JPEG")
    photo(root / "a" / "o6.png", 6, "PNG")
    return root


def packed_images(dst) -> dict[str, torch.Tensor]:
    """``{file name: (3, H, W) uint8}`` of every image of a pack, as PIL reads its member (no EXIF is left there)."""
    names = {}
    for line in (dst / "sources.tsv").read_text().splitlines():
        key, name = line.split("\t")[:2]
        names[key] = name.rsplit("/", 1)[-1]
    got = {}
    for shard in sorted(dst.glob("*.tar")):
        with tarfile.open(shard) as tar:
            for member in tar.getmembers():
                if member.name.endswith(".jpg"):
                    data = tar.extractfile(member).read()
                    with Image.open(io.BytesIO(data)) as img:
                        assert img.getexif().get(0x0112, 1) == 1, member.name  # read alike by every reader
                        pixels = np.array(img.convert("RGB"))
                    got[names[member.name.split(".")[0]]] = torch.from_numpy(pixels).permute(2, 0, 1)
    return got


def test_a_source_read_as_stored_is_packed_as_stored(phones, tmp_path):
    """Before: the packer turned every photo upright whatever the source's reading, so a pack of the swap's source
    gave orientation 6 upright (40 x 24) where the source (and torch) read it sideways (24 x 40)."""
    dataset = ImageFolder(str(phones), T2.Compose([T2.PILToTensor(), T2.CenterCrop((40, 24))]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        source = gpupipe.DataLoader(dataset, batch_size=3, backend="torchvision").source
    assert source.decode_as == "stored"
    pack(source, tmp_path / "stored", progress=False)
    got = packed_images(tmp_path / "stored")
    plain = ImageFolder(str(phones))
    for path, _ in plain.samples:
        want = torch.from_numpy(np.array(plain.loader(path))).permute(2, 0, 1)
        name = path.rsplit("/", 1)[-1]
        assert got[name].shape == want.shape, f"{name}: {tuple(got[name].shape)}, torch {tuple(want.shape)}"
        assert (got[name].float() - want.float()).abs().mean() < 4, name
    manifest = json.loads((tmp_path / "stored" / "manifest.json").read_text())
    assert "decode_as" not in json.dumps(manifest["settings"])  # the pack's pixels are as read: nothing to say


def test_gpupipes_own_folder_is_still_packed_upright(phones, tmp_path):
    pack(OwnFolder(phones), tmp_path / "upright", progress=False)
    got = packed_images(tmp_path / "upright")
    for name in got:
        assert got[name].shape == (3, 40, 24), name
        assert (got[name].float() - torch.from_numpy(SHOWN).permute(2, 0, 1).float()).abs().mean() < 4, name


def test_a_pack_begun_upright_is_not_resumed_as_stored(phones, tmp_path):
    """The reading is part of what a pack packs: a rerun into the same folder from the other reading is refused
    (it would mix upright and sideways photos in one pack)."""
    from gpupipe.pack.journal import PackError

    pack(OwnFolder(phones), tmp_path / "dst", progress=False)
    stored = OwnFolder(phones)
    stored.decode_as = "stored"
    with pytest.raises(PackError, match="other settings"):
        pack(stored, tmp_path / "dst", progress=False)


def test_a_sources_sizes_follow_its_reading_set_after_a_scan(phones):
    """Before: the scan's memo kept the sizes of the reading at the first scan, so a source scanned (``sizes()``,
    a first loader) and then read as stored planned its crops on upright sizes (and the reverse)."""
    from gpupipe.sources import FileList

    source = FileList([(str(p), 0) for p in sorted(phones.rglob("*.*"))], classes=["a"])
    assert source.sizes().tolist() == [[40, 24]] * 3  # o1.jpg, o6.jpg, o6.png upright
    source.decode_as = "stored"
    assert source.sizes().tolist() == [[40, 24], [24, 40], [24, 40]]
    assert source.scan().sizes.tolist() == [[40, 24], [24, 40], [24, 40]]
    assert source.subset([2]).sizes().tolist() == [[24, 40]]
    source.decode_as = "upright"
    assert source.sizes().tolist() == [[40, 24]] * 3


def test_a_rerun_after_a_skipped_file_was_deleted_resumes(phones, tmp_path):
    """A listed file skipped as bad and then deleted (as the manifest's list of bad files invites) is skipped by
    any run alike: before, the rerun stopped saying it "has changed since" and to delete the whole pack; a file
    rewritten since is still refused (``tests/test_redteam_firsthour7.py``)."""
    from gpupipe.pack.journal import PackError
    from gpupipe.sources import FileList

    bad = phones / "a" / "cut.jpg"
    bad.write_bytes((phones / "a" / "o1.jpg").read_bytes()[:200])
    entries = [(str(p), 0) for p in sorted(phones.rglob("*.*"))]
    first = pack(FileList(entries, classes=["a"]), tmp_path / "dst", progress=False)
    assert first.skipped == 1
    bad.unlink()
    again = pack(FileList(entries, classes=["a"]), tmp_path / "dst", progress=False)
    assert (again.skipped, again.packed) == (1, 3)
    bad.write_bytes((phones / "a" / "o1.jpg").read_bytes())  # whole now: it would be packed, so the rerun stops
    with pytest.raises(PackError, match="has changed since"):
        pack(FileList(entries, classes=["a"]), tmp_path / "dst", progress=False)


def test_lightnings_iterable_check_leaves_the_pass_under_way_the_loaders_own(tmp_path):
    """Lightning's ``_check_dataloader_iterable`` (an ``iter()`` it never reads, run while a resumed fit's training
    pass is under way) ends no pass; before, the loader took that unread pass for its live one, so the next
    ``iter()`` (validation mid-epoch over the same loader) no longer ended the training pass: both read at once and
    the training pass then stopped with a message naming nothing ("ended ... by , which chose ...")."""
    from lightning.pytorch.trainer.connectors.data_connector import _check_dataloader_iterable, _DataLoaderSource
    from lightning.pytorch.trainer.states import TrainerFn

    from gpupipe import ops
    from gpupipe.loading.frameworks import PassEnded

    for c in "ab":
        (tmp_path / c).mkdir()
        for k in range(4):
            Image.fromarray(np.full((8, 8, 3), k * 20, np.uint8)).save(tmp_path / c / f"{k}.png")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = gpupipe.loader(
            str(tmp_path), batch_size=2, backend="torchvision", pipeline=[ops.Decode(), ops.Resize((8, 8))]
        )
        training = iter(loader)
        first = next(training)[1].tolist()
        _check_dataloader_iterable(loader, _DataLoaderSource(loader, ""), TrainerFn.FITTING)
        second = next(training)[1].tolist()  # the pass goes on after the check
        iter(loader)  # a new pass ends the one under way, as without the check
        with pytest.raises(PassEnded, match="a new pass over this loader began"):
            next(training)
    assert len(first) == len(second) == 2


def test_a_pass_ended_by_a_new_one_names_it_wherever_its_loop_asks_again():
    """A pass whose cursor began another (a route where the loop's own wrapper did not end it first, as Lightning's
    iterable check did) said it was "ended ... by , which chose ...", naming nothing."""
    from gpupipe.loading.epochs import EpochCursor

    cursor = EpochCursor()
    first = cursor.begin(4)
    first.done = 1
    cursor.begin(4)
    assert not first.live
    said = first.ended()
    assert "after 1 of 4 batches by a new pass over this loader (iter(loader) again)," in said, said


def test_wrappers_or_a_compose_that_hold_themselves_are_refused_naming_the_cycle(tmp_path):
    """Two preset-like wrappers delegating to each other (or a Compose holding itself) ended in a bare
    ``RecursionError`` from inside gpupipe; torchvision recurses without end at the first image. Now refused."""
    import torchvision.transforms as T
    from helpers import make_image_folder

    class Preset:
        def __init__(self, transforms=None):
            self.transforms = transforms

        def __call__(self, img):
            return self.transforms(img)

    root = tmp_path / "data"
    make_image_folder(root, {"a": 2, "b": 2}, sizes=(24, 32))
    a, b = Preset(), Preset()
    a.transforms, b.transforms = b, a
    looped = T.Compose([T.ToTensor()])
    looped.transforms.append(looped)
    for transform, said in ((a, "Preset.transforms.transforms"), (looped, "Compose[1]")):
        with pytest.raises(gpupipe.UnsupportedTransform, match="holds itself") as refused:
            gpupipe.DataLoader(ImageFolder(str(root), transform), batch_size=2)
        assert said in str(refused.value), str(refused.value)
