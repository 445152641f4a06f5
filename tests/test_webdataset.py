"""Foreign WebDataset tars (written here with ``tarfile``, no index): labels from ``.cls`` and ``.json``,
brace patterns, problems reported by ``on_error``, indexes kept until a tar changes, tars over HTTP."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
import torch

import gpupipe
from gpupipe.remote import expand_braces
from helpers import CPU_BACKENDS
from servers import FolderServer
from wds_helpers import add, png

PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]


def write_tars(folder: Path, tars: int = 3, per_tar: int = 10) -> dict:
    """``data-00N.tar`` with ``<key>.png`` (grey level = sample number * 5), ``.cls`` and ``.json``
    labels; returns ``{sample number: label}``."""
    folder.mkdir(parents=True, exist_ok=True)
    labels = {}
    for t in range(tars):
        with tarfile.open(folder / f"data-{t:03d}.tar", "w") as tar:
            for i in range(per_tar):
                n = t * per_tar + i
                labels[n] = (n * 7) % 4
                add(tar, f"part/{n:05d}.png", png(n * 5))
                add(tar, f"part/{n:05d}.cls", f"{labels[n]}\n".encode())
                add(tar, f"part/{n:05d}.json", json.dumps({"meta": {"label": labels[n]}, "caption": "x"}).encode())
    return labels


@pytest.fixture(scope="module")
def tars(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wds")
    return folder, write_tars(folder)


def numbers(images: torch.Tensor) -> list:
    return [round(float(v) / 5) for v in images.float().mean(dim=(1, 2, 3))]


@pytest.mark.parametrize("label", ["cls", "json:meta.label"])
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_foreign_tars_load_on_every_backend(tars, tmp_path, backend, label):
    folder, expected = tars
    source = gpupipe.WebDataset(str(folder / "data-{000..002}.tar"), label=label, cache_dir=tmp_path)
    assert len(source) == 30 and source.classes == ["0", "1", "2", "3"] and not source.problems
    loader = gpupipe.loader(source, PIPELINE, batch_size=7, backend=backend, num_threads=1, shuffle=False)
    seen = [(n, int(y)) for images, labels in loader for n, y in zip(numbers(images), labels)]
    assert seen == sorted(expected.items()), "every sample once, in tar order, with its label"
    shuffled = gpupipe.loader(source, PIPELINE, batch_size=7, backend=backend, num_threads=1, seed=3)
    pairs = [(n, int(y)) for images, labels in shuffled for n, y in zip(numbers(images), labels)]
    assert sorted(pairs) == sorted(expected.items()) and pairs != sorted(pairs)


def test_backends_agree_on_foreign_tars(tars, tmp_path):
    pytest.importorskip("nvidia.dali")
    source = gpupipe.WebDataset(str(folder_pattern(tars[0])), cache_dir=tmp_path)
    pipeline = [gpupipe.Decode(), gpupipe.RandomResizedCrop(8), gpupipe.HorizontalFlip(), gpupipe.Output("uint8")]
    runs = [[(x, y) for x, y in gpupipe.loader(source, pipeline, batch_size=8, backend=b, num_threads=1, seed=2)]
            for b in ("dali-cpu", "torchvision")]
    assert len(runs[0]) == len(runs[1]) == 4, "30 samples in batches of 8"
    assert all(torch.equal(a[1], b[1]) and (a[0].float() - b[0].float()).abs().mean() < 1 for a, b in zip(*runs))


def folder_pattern(folder: Path) -> Path:
    return folder / "data-{000..002}.tar"


def test_brace_patterns_expand_as_webdataset_does():
    assert expand_braces("s-{000..002}.tar") == ["s-000.tar", "s-001.tar", "s-002.tar"]
    assert expand_braces("{a,b}/x-{8..10}.tar") == ["a/x-8.tar", "a/x-9.tar", "a/x-10.tar", "b/x-8.tar",
                                                    "b/x-9.tar", "b/x-10.tar"]
    assert expand_braces("plain.tar") == ["plain.tar"]
    with pytest.raises(ValueError, match="runs backwards"):
        expand_braces("s-{5..1}.tar")
    with pytest.raises(ValueError, match="more than 1,000,000 files"):
        expand_braces("s-{0..9999999}.tar")


def test_unusable_members_and_samples_are_reported(tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    with tarfile.open(folder / "a.tar", "w") as tar:
        add(tar, "good.png", png(10))
        add(tar, "good.cls", b"1")
        add(tar, "nolabel.png", png(20))
        add(tar, "noimage.cls", b"0")
        add(tar, "with space.png", png(30))
        add(tar, "with space.cls", b"0")
        add(tar, "stranger.png", png(40))
        add(tar, "stranger.cls", b"dog")
        add(tar, "big.png", png(50))
        add(tar, "big.cls", b"7")
    with tarfile.open(folder / "b.tar", "w") as tar:
        add(tar, "ok.png", png(60))
        add(tar, "ok.cls", b"0")
        add(tar, "cut.png", png(70, size=(64, 64)))
        add(tar, "cut.cls", b"0")
    with tarfile.open(folder / "b.tar") as tar:
        cut = tar.getmember("cut.png")
    data = (folder / "b.tar").read_bytes()
    (folder / "b.tar").write_bytes(data[: cut.offset_data + cut.size // 2])  # an interrupted copy
    source = gpupipe.WebDataset([folder / "a.tar", folder / "b.tar"], classes=["cat", "tabby"],
                                cache_dir=tmp_path / "cache")
    problems = {p.path.rsplit("/", 1)[1]: p.reason for p in source.problems}
    assert problems == {
        "a.tar#nolabel": "no .cls member for the label",
        "a.tar#noimage": "no image member (.jpg, .jpeg, .png, .webp)",
        "a.tar#with space.png": "a name with white space, which DALI's tar index cannot hold",
        "a.tar#with space.cls": "a name with white space, which DALI's tar index cannot hold",
        "a.tar#stranger.png": "label 'dog' is not one of the 2 classes",
        "a.tar#big.png": "label 7 is not one of the 2 classes",
        "b.tar#cut.png": "lies past the end of the tar (cut short?)",
        "b.tar": "not a readable tar after 2 members (unexpected end of data)",
    }
    assert sorted(Path(n).name for n in source.names) == ["a.tar#good.png", "b.tar#ok.png"]
    with pytest.raises(ValueError, match="do not pair up|problems found building the source"):
        gpupipe.loader(source, PIPELINE, batch_size=2, backend="torchvision")
    loader = gpupipe.loader(source, PIPELINE, batch_size=2, backend="torchvision", on_error="skip", shuffle=False)
    images, labels = next(iter(loader))
    assert numbers(images) == [2, 12] and labels.tolist() == [1, 0]
    assert len(loader.skipped) == len(source.problems)


def test_labels_given_as_names_are_numbered_in_sorted_order(tmp_path):
    with tarfile.open(tmp_path / "n.tar", "w") as tar:
        for i, name in enumerate(["zebra", "ant", "moth", "ant"]):
            add(tar, f"{i}.png", png(i * 5))
            add(tar, f"{i}.txt", name.encode())
    source = gpupipe.WebDataset(tmp_path / "n.tar", label="txt", cache_dir=tmp_path / "cache")
    assert source.classes == ["ant", "moth", "zebra"] and source.labels.tolist() == [2, 0, 1, 0]


def test_an_index_is_kept_until_its_tar_changes(tmp_path, monkeypatch):
    folder = tmp_path / "tars"
    write_tars(folder, tars=2, per_tar=4)
    first = gpupipe.WebDataset(str(folder / "data-{000..001}.tar"), cache_dir=tmp_path / "cache")
    calls = []
    from gpupipe.sources import webdataset as wds

    real = wds.index_tar
    monkeypatch.setattr(wds, "index_tar", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    again = gpupipe.WebDataset(str(folder / "data-{000..001}.tar"), cache_dir=tmp_path / "cache")
    assert calls == [] and again.labels.tolist() == first.labels.tolist()
    with tarfile.open(folder / "data-001.tar", "w") as tar:  # rewritten with other labels
        for i in range(4):
            add(tar, f"{i}.png", png(i))
            add(tar, f"{i}.cls", b"0")
    changed = gpupipe.WebDataset(str(folder / "data-{000..001}.tar"), cache_dir=tmp_path / "cache")
    assert calls == [str(folder / "data-001.tar")] and changed.labels[4:].tolist() == [0, 0, 0, 0]
    for kept in (tmp_path / "cache" / "wds-index").glob("*.json"):  # damaged by hand: rebuilt, not trusted
        data = json.loads(kept.read_text())
        del data["index"]["samples"]
        kept.write_text(json.dumps(data))
    rebuilt = gpupipe.WebDataset(str(folder / "data-{000..001}.tar"), cache_dir=tmp_path / "cache")
    assert len(calls) == 3 and rebuilt.labels.tolist() == changed.labels.tolist()


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_foreign_tars_over_http(tars, tmp_path, backend):
    pytest.importorskip("aiohttp")  # the http extra
    folder, expected = tars
    server = FolderServer(folder)
    try:
        source = gpupipe.WebDataset(f"{server.url}/data-{{000..002}}.tar", cache_dir=tmp_path)
        loader = gpupipe.loader(source, PIPELINE, batch_size=7, backend=backend, num_threads=1, shuffle=False)
        seen = [(n, int(y)) for images, labels in loader for n, y in zip(numbers(images), labels)]
        assert seen == sorted(expected.items())
        assert set(server.tar_gets().values()) == {1}, "indexed from the cached copy, then read from it"
    finally:
        server.stop()


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_member_in_a_format_dali_does_not_decode_is_refused_on_every_backend(tmp_path, backend):
    """A GIF stored as ``.png`` (PIL opens it, DALI fails on it mid-epoch): refused when the tar is indexed,
    naming the format, so that no backend delivers what another fails on."""
    import io

    from PIL import Image

    gif = io.BytesIO()
    Image.new("P", (12, 16), 3).save(gif, "GIF")
    folder = tmp_path / "tars"
    folder.mkdir()
    with tarfile.open(folder / "a.tar", "w") as tar:
        add(tar, "good.png", png(10))
        add(tar, "good.cls", b"1")
        add(tar, "moving.png", gif.getvalue())
        add(tar, "moving.cls", b"0")
    source = gpupipe.WebDataset(folder / "a.tar", cache_dir=tmp_path / "cache")
    loader = gpupipe.loader(source, PIPELINE, batch_size=1, backend=backend, on_error="skip", shuffle=False)
    batches = list(loader)
    assert [labels.tolist() for _, labels in batches] == [[1]]
    reasons = {Path(s.path).name: s.reason for s in loader.skipped}
    assert list(reasons) == ["a.tar#moving.png"], reasons
    assert "GIF format" in reasons["a.tar#moving.png"], reasons
