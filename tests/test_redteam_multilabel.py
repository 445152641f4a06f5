"""Red team: multi-label classification end to end (list files and pairs as users write them, every backend,
packs local and over HTTP, resume, 2-rank torchrun, MixUp / CutMix, the swap path).

Every sample's multi-hot row is compared with what its list line says.
"""

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import CPU_BACKEND_NAMES, flat_folder, sample_ids
from servers import FolderServer

import gpupipe
from gpupipe.pack import PackSettings, pack, verify

PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]
HERE = Path(__file__).parent
N = 23
#: Open Images-, COCO- and NUS-WIDE-style tags: machine ids with slashes, names with digits.
NAMES = ["/m/01g317", "/m/0bt9lr", "person", "traffic_light", "sky", "car2"]
_rng = np.random.default_rng(4)
#: Each image's tags: 1 to 3, in no order.
TAGS = {i: [str(t) for t in _rng.choice(NAMES, int(_rng.integers(1, 4)), replace=False)] for i in range(N)}


def img(i: int) -> str:
    return f"imgs/class_0/s{i:04d}.png"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """``N`` images whose colour codes their index, and ``tags.txt`` of their ``TAGS``."""
    root = tmp_path_factory.mktemp("multilabel")
    flat_folder(root / "imgs", N, classes=1)
    (root / "tags.txt").write_text("".join(f"{img(i)} {','.join(t)}\n" for i, t in TAGS.items()))
    return root


def expected(ids, classes, tags) -> torch.Tensor:
    out = torch.zeros(len(ids), len(classes))
    for row, i in enumerate(ids):
        for tag in tags[i]:
            out[row, classes.index(tag)] = 1.0
    return out


def sets(source) -> list:
    return [sorted(int(v) for v in s) for s in source.label_sets(range(len(source)))]


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, newline="")
    return path


# -- parsing lines as users write them ----------------------------------------------------------------------


@pytest.mark.parametrize("label", ["cat, dog", "cat ,dog", "cat , dog", "cat,\u00a0dog", "cat; dog", "cat ;dog"])
def test_spaces_around_separators_keep_the_labels_and_the_path(data, label):
    """`path cat, dog` was read as the file `path cat,` labelled `dog` (or refused for an empty label)."""
    listing = write(data, "spaced.txt", f"{img(0)} {label}\n{img(1)} dog\nmy photo.png cat, dog\n")
    source = gpupipe.FileList(listing)
    assert source.kind is gpupipe.TargetKind.MULTI_LABEL and source.classes == ["cat", "dog"]
    assert source.names == [str(data / img(0)), str(data / img(1)), str(data / "my photo.png")]
    assert sets(source) == [[0, 1], [1], [0, 1]]


def test_duplicate_labels_count_once_everywhere(data, tmp_path):
    text = write(data, "dups.txt", f"{img(0)} cat,cat\n{img(1)} dog,cat,dog\n")
    csv_file = write(data, "dups.csv", f'path,labels\n{img(0)},"cat;cat"\n{img(1)},dog;cat;dog\n')
    pairs = gpupipe.FileList([(data / img(0), [0, 0]), (data / img(1), np.array([1, 0, 1, 1]))], classes=["cat", "dog"])
    for source in (gpupipe.FileList(text), gpupipe.FileList(csv_file), pairs):
        assert [s.tolist() for s in source.label_sets([0, 1])] == [[0], [1, 0]]
    pack(gpupipe.FileList(text), tmp_path / "packed", PackSettings(shard_size=64 * 1024), workers=1, progress=False)
    manifest = json.loads((tmp_path / "packed" / "manifest.json").read_text())
    assert sorted(map(sorted, manifest["shards"][0]["label_lists"])) == [[0], [0, 1]]


@pytest.mark.parametrize("label", ["1_0", "\u0661", "\uff11"])
def test_only_ascii_digits_are_class_indices(data, label):
    """`int()` read `1_0` as 10 and Arabic or full-width digits as 1: a name that looks like a number became
    another class silently."""
    named = gpupipe.FileList(write(data, "names.txt", f"{img(0)} {label},cat\n{img(1)} cat\n"))
    assert named.classes == sorted([label, "cat"]) and sets(named)[1] == [named.classes.index("cat")]
    with pytest.raises(ValueError, match=re.escape(repr(label)) + r" of .*mixed\.txt:2\) .*all ints or all class"):
        gpupipe.FileList(write(data, "mixed.txt", f"{img(0)} 2\n{img(1)} {label},2\n"))


def test_mixed_indices_and_names_name_the_line(data):
    said = r"label 'cat' of .*mixed\.txt:3\) is a class name, but label 0 of .*mixed\.txt:1\) is a class index"
    with pytest.raises(ValueError, match=said):
        gpupipe.FileList(write(data, "mixed.txt", f"{img(0)} 0,2\n{img(1)} 1\n{img(2)} 1,cat\n"))
    with pytest.raises(ValueError, match=r"label 1\.5 of '.*s0001\.png' is neither a class index \(int\) nor"):
        gpupipe.FileList([(data / img(0), [0]), (data / img(1), [1.5])])


def test_a_label_outside_classes_names_the_line(data):
    listing = write(data, "tags3.txt", f"{img(0)} cat,dog\n{img(1)} dog\n{img(2)} dog,bird,eel\n")
    said = r"labels \['bird', 'eel'\] are not among classes \['cat', 'dog'\] \(label 'bird' of .*tags3\.txt:3"
    with pytest.raises(ValueError, match=said):
        gpupipe.FileList(listing, classes=["cat", "dog"])
    numbered = write(data, "numbered.txt", f"{img(0)} 0,1\n{img(1)} 1,3\n")
    with pytest.raises(ValueError, match=r"label 3 of .*numbered\.txt:2\) is outside the class range 0\.\.2"):
        gpupipe.FileList(numbered, classes=["a", "b", "c"])


def test_pairs_as_users_give_them(data):
    """`classes=["cat", "cat", "dog"]` numbered `cat` 1 and left class 0 empty; `(path, [1, 0, 1])` (a multi-hot
    row) was read as the classes {0, 1}; torch labels were refused."""
    for labels in (["cat", "dog"], "cat"):
        with pytest.raises(ValueError, match=r"classes=.* names 'cat' twice"):
            gpupipe.FileList([(data / img(0), labels), (data / img(1), "dog")], classes=["cat", "cat", "dog"])
    rows = [np.array([1, 0, 1]), np.array([0, 1, 0]), torch.tensor([1, 1, 0])]
    with pytest.raises(ValueError, match=r"look like multi-hot rows .*np\.flatnonzero"):
        gpupipe.FileList([(data / img(i), r) for i, r in enumerate(rows)], classes=["a", "b", "c"])
    pairs = [(data / img(0), torch.tensor([2, 0])), (data / img(1), np.int64(1)), (data / img(2), torch.tensor(2))]
    assert sets(gpupipe.FileList(pairs, classes=["a", "b", "c"])) == [[0, 2], [1], [2]]
    single = gpupipe.FileList([(data / img(0), torch.tensor(1)), (data / img(1), np.int32(0))])
    assert single.kind is gpupipe.TargetKind.LABEL and single.labels.tolist() == [1, 0]


def test_empty_label_sets(data):
    """An image with no label is an all-zero row; no label at all, without classes=, makes no classes."""
    source = gpupipe.FileList([(data / img(0), []), (data / img(1), ["dog"])], classes=["cat", "dog"])
    loader = gpupipe.loader(source, PIPELINE, batch_size=2, backend="torchvision", num_threads=0, shuffle=False)
    assert next(iter(loader))[1].tolist() == [[0.0, 0.0], [0.0, 1.0]]
    with pytest.raises(ValueError, match="no labels at all: pass classes="):
        gpupipe.FileList([(data / img(0), []), (data / img(1), [])])
    listing = write(data, "negatives.csv", f"path,labels\n{img(0)},cat;dog\n{img(1)},\n")
    with pytest.raises(ValueError, match=r"negatives\.csv:3: the label is empty"):
        gpupipe.FileList(listing)  # an empty CSV cell is no label only with multi_label=True
    assert sets(gpupipe.FileList(listing, multi_label=True)) == [[0, 1], []]


def test_labels_written_apart_say_how_to_give_several_labels(data):
    """`path cat dog` was read as the file `path cat` (missing) labelled `dog`."""
    listing = write(data, "spaces.txt", f"{img(0)} cat\n{img(1)} cat dog\n")
    with pytest.raises(ValueError, match=r"spaces\.txt:2: .*s0001\.png' exists.*separate several labels with ','"):
        gpupipe.FileList(listing)
    with pytest.raises(ValueError, match=r"tags3\.csv:2: expected 'path,label'.* quote them .*or separate them with"):
        gpupipe.FileList(write(data, "tags3.csv", f"path,labels\n{img(0)},cat,dog\n"))


def test_multi_label_argument(data):
    """A val list whose lines happen to hold one tag each was single-label (targets (B,) int64 against the train
    list's (B, C)); multi_label=True keeps it multi-label, False refuses a line with several."""
    val = write(data, "val.txt", f"{img(0)} cat\n{img(1)} dog\n")
    assert gpupipe.FileList(val).kind is gpupipe.TargetKind.LABEL
    source = gpupipe.FileList(val, multi_label=True, classes=["bird", "cat", "dog"])
    assert source.kind is gpupipe.TargetKind.MULTI_LABEL and sets(source) == [[1], [2]]
    loader = gpupipe.loader(source, PIPELINE, batch_size=2, backend="torchvision", num_threads=0, shuffle=False)
    assert next(iter(loader))[1].tolist() == [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    with pytest.raises(ValueError, match=r"several labels \['cat', 'dog'\] of .*train\.txt:2\), but multi_label=False"):
        gpupipe.FileList(write(data, "train.txt", f"{img(0)} cat\n{img(1)} cat,dog\n"), multi_label=False)
    with pytest.raises(ValueError, match="multi_label must be True, False or None"):
        gpupipe.FileList(val, multi_label="yes")


def test_a_pair_label_holding_a_comma_is_warned_about(data, caplog):
    with caplog.at_level(logging.WARNING, logger="gpupipe.sources"):
        source = gpupipe.FileList([(data / img(0), "cat,dog"), (data / img(1), "dog")])
    assert source.classes == ["cat,dog", "dog"]
    assert "label 'cat,dog' of" in caplog.text and "['cat', 'dog']" in caplog.text


def test_crlf_bom_and_a_mix_of_single_and_several_labels(data):
    listing = data / "windows.txt"
    listing.write_bytes(b"\xef\xbb\xbf" + f"{img(0)} cat\r\n{img(1)} cat,dog\r\n\r\n{img(2)} dog\r\n".encode())
    source = gpupipe.FileList(listing)
    assert source.kind is gpupipe.TargetKind.MULTI_LABEL and source.classes == ["cat", "dog"]
    assert source.names[0] == str(data / img(0)) and sets(source) == [[0], [0, 1], [1]]


@pytest.mark.parametrize("header", ["image,tags", "ImageID,LabelName", "filename,categories", "path,label"])
def test_a_csv_header_is_not_read_as_a_sample(data, header):
    """`image,tags` was read as the file `image` labelled `tags`: one class too many in every target row."""
    source = gpupipe.FileList(write(data, "header.csv", f'{header}\n{img(0)},"cat,dog"\n{img(1)},dog\n'))
    assert source.classes == ["cat", "dog"] and source.names == [str(data / img(0)), str(data / img(1))]


@pytest.mark.parametrize("suffix", [".txt", ".csv"])
def test_an_image_listed_on_several_lines_with_other_labels(data, suffix):
    """Open Images' long form (one line per image and label) made two single-label samples of one image with
    contradicting labels; it is refused naming both lines, and merged into one label set with multi_label=True."""
    sep = " " if suffix == ".txt" else ","
    listing = write(data, "long" + suffix, f"{img(0)}{sep}cat\n{img(1)}{sep}dog\n{img(0)}{sep}dog\n{img(2)}{sep}cat\n")
    said = r"s0000\.png' is listed with other labels on line 1 \('cat'\) and line 3 \('dog'\) of .*long"
    with pytest.raises(ValueError, match=said + re.escape(suffix) + r".*multi_label=True"):
        gpupipe.FileList(listing)
    merged = gpupipe.FileList(listing, multi_label=True)
    assert merged.names == [str(data / img(i)) for i in (0, 1, 2)] and sets(merged) == [[0, 1], [1], [0]]
    again = write(data, "again" + suffix, f"{img(0)}{sep}cat\n{img(0)}{sep}cat\n")  # listed twice alike: kept
    assert len(gpupipe.FileList(again)) == 2
    pairs = [(data / img(0), ["cat"]), (data / img(0), ["dog", "cat"])]
    with pytest.raises(ValueError, match=r"s0000\.png' is listed with other labels: \['cat'\] and \['dog', 'cat'\]"):
        gpupipe.FileList(pairs)
    assert sets(gpupipe.FileList(pairs, multi_label=True)) == [[0, 1]]


def test_a_hostile_line_of_separators_is_read_in_linear_time(data):
    """A line of many `,   ` that ends in two words (untrusted input) must not make the parser backtrack for
    ever (a regular expression over the path and the labels did: 10 separators took a second, each one more
    doubled it). In a subprocess, so that a hang fails the test instead of the suite."""
    listing = write(data, "hostile.txt", "a b" + " ,   " * 5000 + " x y\n")
    code = f"import gpupipe; print(gpupipe.FileList({str(listing)!r}).classes)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "['y']", proc.stderr[-2000:]


def test_list_cells_as_pandas_writes_them(data):
    """`df.to_csv()` of a column of lists writes `"['cat', 'dog']"`: it was read as the classes `['cat'` and
    `'dog']`. A cell in brackets is a list (quotes around items dropped; `[]`: no label)."""
    csv_file = write(data, "pandas.csv", f"path,tags\n{img(0)},\"['cat', 'dog']\"\n{img(1)},[]\n{img(2)},\"[dog]\"\n")
    source = gpupipe.FileList(csv_file)
    assert source.classes == ["cat", "dog"] and sets(source) == [[0, 1], [], [1]]
    text = write(data, "brackets.txt", f"{img(0)} [0, 2]\n{img(1)} [1]\n")
    assert sets(gpupipe.FileList(text)) == [[0, 2], [1]]
    with pytest.raises(ValueError, match=r"bad\.csv:2: empty label in '\[cat, , dog\]'"):
        gpupipe.FileList(write(data, "bad.csv", f'path,tags\n{img(0)},"[cat, , dog]"\n'))


# -- every sample's targets, every backend, packs, resume, mixing -------------------------------------------


def read_all(source, backend: str, **kwargs) -> list:
    loader = gpupipe.loader(source, PIPELINE, batch_size=5, backend=backend, num_threads=1, seed=3, **kwargs)
    return [(sample_ids(images), targets) for images, targets in loader]


def assert_targets_match_the_list(batches, classes, tags) -> None:
    seen = []
    for ids, targets in batches:
        assert targets.dtype == torch.float32 and targets.shape == (len(ids), len(classes))
        assert torch.equal(targets, expected(ids, classes, TAGS)), ids
        seen += ids
    assert sorted(seen) == list(range(N)), "every listed image once"


def test_every_sample_on_every_backend_in_the_same_order_and_resumed(data):
    source = gpupipe.FileList(data / "tags.txt")
    assert source.classes == sorted(NAMES)
    runs = {}
    for backend in CPU_BACKEND_NAMES:
        runs[backend] = read_all(source, backend)
        assert_targets_match_the_list(runs[backend], source.classes, TAGS)
        loader = gpupipe.loader(source, PIPELINE, batch_size=5, backend=backend, num_threads=1, seed=3)
        batches = iter(loader)
        for _ in range(2):
            next(batches)
        state = loader.state_dict()
        again = gpupipe.loader(data / "tags.txt", PIPELINE, batch_size=5, backend=backend, num_threads=1, seed=3)
        again.load_state_dict(state)
        rest = [(sample_ids(images), targets) for images, targets in again]
        assert [ids for ids, _ in rest] == [ids for ids, _ in runs[backend][2:]]
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(rest, runs[backend][2:]))
    first, *others = runs.values()
    for other in others:
        assert [ids for ids, _ in other] == [ids for ids, _ in first]
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(other, first))


def test_packed_multi_label_read_back_locally_and_over_http(data, tmp_path):
    dst = tmp_path / "packed"
    pack(data / "tags.txt", dst, PackSettings(shard_size=24 * 1024), workers=1, progress=False)
    assert verify(dst) == [] and len(list(dst.glob("*.tar"))) > 1
    server = FolderServer(dst)
    try:
        for where in (dst, server.url):
            shards = gpupipe.Shards(where)
            assert shards.kind is gpupipe.TargetKind.MULTI_LABEL and shards.classes == sorted(NAMES)
            for backend in CPU_BACKEND_NAMES:
                assert_targets_match_the_list(read_all(where, backend), shards.classes, TAGS)
    finally:
        server.stop()


def colour(i: int) -> torch.Tensor:
    """The colour :func:`flat_folder` gives sample ``i``."""
    return torch.tensor([(i % 16) * 16 + 8, (i // 16) * 16 + 8, 77], dtype=torch.float32)


@pytest.mark.parametrize("op", [gpupipe.MixUp(alpha=0.4), gpupipe.CutMix(alpha=1.0)], ids=["mixup", "cutmix"])
def test_mixed_multi_hot_targets_weigh_the_labels_as_the_pixels_are_mixed(data, op):
    """Row r is lam * own + (1 - lam) * row r-1's, lam read back from the pixels (MixUp: the blend of the two
    colours; CutMix: the share of the image still in its own colour); a last batch of one is left unmixed."""
    ops = [gpupipe.Decode(), gpupipe.Resize((16, 16)), gpupipe.Normalize(mean=(0, 0, 0), std=(1 / 255,) * 3), op]
    for backend in CPU_BACKEND_NAMES:
        loader = gpupipe.loader(
            data / "tags.txt", ops, batch_size=11, backend=backend, num_threads=1, shuffle=False, seed=5
        )  # 11, 11, 1
        lams = []
        for b, (images, targets) in enumerate(loader):
            ids = list(range(11 * b, 11 * b + len(images)))
            plain = expected(ids, loader.classes, TAGS)
            if len(ids) == 1:
                assert torch.equal(targets, plain)
                continue
            for row, i in enumerate(ids):
                own, other = colour(i), colour(ids[row - 1])
                pixels = images[row].reshape(3, -1)
                if isinstance(op, gpupipe.MixUp):
                    ch = 0 if own[0] != other[0] else 1
                    lam = ((pixels[ch] - other[ch]) / (own[ch] - other[ch])).mean().item()
                else:
                    lam = ((pixels - own[:, None]).abs().sum(0) < 1).float().mean().item()
                lams.append(lam)
                assert torch.allclose(targets[row], lam * plain[row] + (1 - lam) * plain[row - 1], atol=1e-4)
        assert len(lams) == N - 1 and 0 < sum(lams) / len(lams) < 1 and len({round(x, 3) for x in lams}) > 1


def test_a_users_dataset_of_multi_hot_targets_is_refused_or_read_as_it_is(data):
    """The swap path: gpupipe cannot compile a dataset's own ``__getitem__`` (refused, saying what reads several
    labels per image); ``fallback="torchvision"`` reads it as it is, with torch's targets."""
    from PIL import Image
    from torchvision import transforms

    class Tagged(torch.utils.data.Dataset):
        def __len__(self):
            return 6

        def __getitem__(self, i):
            target = torch.zeros(3)
            target[[i % 3, (2 * i) % 3]] = 1.0
            return transforms.ToTensor()(Image.open(data / img(i)).convert("RGB")), target

    with pytest.raises(ValueError, match=r"cannot read a Tagged.*gpupipe\.FileList.*a list of labels per image"):
        gpupipe.DataLoader(Tagged(), batch_size=3)
    loader = gpupipe.DataLoader(Tagged(), batch_size=3, fallback="torchvision", shuffle=False, num_workers=0)
    reference = torch.utils.data.DataLoader(Tagged(), batch_size=3)
    for (images, targets), (want_images, want) in zip(loader, reference, strict=True):
        assert targets.dtype == torch.float32 and torch.equal(targets, want) and torch.equal(images, want_images)


# -- two ranks under torchrun ------------------------------------------------------------------------------


def test_two_ranks_split_a_multi_label_list_disjointly_and_completely_with_the_right_targets(data, tmp_path):
    """One torchrun launch (2 ranks, gloo): per backend, the list with even_batches on (padding repeats the order's
    start, equal batch counts) and off (each sample read once over both ranks), and a pack of it."""
    packed = tmp_path / "packed"
    pack(data / "tags.txt", packed, PackSettings(shard_size=24 * 1024), workers=1, progress=False)
    launcher = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if k not in launcher} | {"OMP_NUM_THREADS": "1"}
    args = {
        "--list": data / "tags.txt",
        "--packed": packed,
        "--out": tmp_path,
        "--backends": ",".join(CPU_BACKEND_NAMES),
    }
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command += [str(HERE / "redteam_multilabel_worker.py"), *(str(v) for kv in args.items() for v in kv)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    cases = (("list", True), ("list", False), ("packed", True))
    assert set(ranks[0]) == {f"{kind}-{b}-{even}" for b in CPU_BACKEND_NAMES for kind, even in cases}
    for case in ranks[0]:
        runs = [r[case] for r in ranks]
        classes = runs[0]["classes"]
        assert classes == runs[1]["classes"] == sorted(NAMES)
        even = case.endswith("True")
        for epoch in (0, 1):
            ids = []
            for run in runs:
                assert len(run["epochs"][epoch]) == run["len"]
                for batch in run["epochs"][epoch]:
                    assert batch["targets"] == expected(batch["ids"], classes, TAGS).tolist(), (case, batch["ids"])
                ids.append(sum((b["ids"] for b in run["epochs"][epoch]), []))
            if even:
                assert len(ids[0]) == len(ids[1]) == 12 and runs[0]["len"] == runs[1]["len"] == 4
                assert sorted(set(ids[0] + ids[1])) == list(range(N)) and len(set(ids[0]) & set(ids[1])) <= 1
            else:
                assert sorted(ids[0] + ids[1]) == list(range(N)), "each sample once over both ranks"
        assert runs[0]["epochs"][0] != runs[0]["epochs"][1], "a new order each epoch"
    for backend in CPU_BACKEND_NAMES[1:]:  # every backend reads the same samples in the same order
        assert ranks[0][f"list-{backend}-True"] == ranks[0][f"list-{CPU_BACKEND_NAMES[0]}-True"]


def test_the_loaders_dataset_view_gives_each_images_labels(data):
    """`loader.dataset.targets` / `samples` / `[i]` gave -1 for every image of a multi-label source (what a training
    script reads to weigh its classes, `pos_weight`): now the label sets, and `[i]` the row its batches carry."""
    loader = gpupipe.loader(data / "tags.txt", PIPELINE, batch_size=4, backend="torchvision", num_threads=0)
    view, classes = loader.dataset, loader.classes
    want = [sorted(classes.index(t) for t in TAGS[i]) for i in range(N)]
    assert [sorted(t) for t in view.targets] == want
    assert [(path, sorted(t)) for path, t in view.samples] == [(str(data / img(i)), want[i]) for i in range(N)]
    image, row = view[3]
    assert image.size == (24, 20) and row.dtype == torch.float32 and torch.equal(row, expected([3], classes, TAGS)[0])
    batch = torch.utils.data.default_collate([view[i][1] for i in range(2)])
    assert torch.equal(batch, expected([0, 1], classes, TAGS))
    source = gpupipe.FileList(data / "tags.txt")
    assert [(s.path, sorted(s.label)) for s in source.samples] == [(str(data / img(i)), want[i]) for i in range(N)]
