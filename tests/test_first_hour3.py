"""A newcomer's first hour, third pass: the snippets of the pages read first, run as written, and the
mistakes a newcomer makes with the two commands and the loader, each answered by one clear line.

The code blocks are read from the pages themselves (README.md, docs/index.md, docs/loader.md,
docs/torchvision.md, docs/pipelines.md, docs/bench.md, docs/packing.md), so a snippet changed on its page is
the snippet run here (the example commands are tests/test_readme_examples.py's). A fragment's free names
(``mean``, ``traindir``, ``model``) are given by a short prelude, the paths it names (``data/train``) are a
tiny image folder in a temporary working directory.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from helpers import make_image_folder

import gpupipe
from gpupipe.bench.__main__ import main as bench_main
from gpupipe.pack.__main__ import main as pack_main
from gpupipe.pack.__main__ import parse_args as pack_args

ROOT = Path(__file__).resolve().parents[1]
#: The names the fragments use without defining them, as the script around them would.
PRELUDE = """
import torch, torchvision
from torchvision import transforms
import gpupipe
mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
traindir = "data/train"
"""


def blocks(page: str, language: str) -> list[str]:
    """The fenced code blocks of ``page`` (relative to the repository) in ``language``, in order."""
    text = (ROOT / page).read_text()
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def block(page: str, language: str, holding: str) -> str:
    """The one block of ``page`` in ``language`` that holds ``holding``."""
    found = [b for b in blocks(page, language) if holding in b]
    assert len(found) == 1, f"{page}: {len(found)} {language} blocks hold {holding!r}"
    return found[0]


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """A working directory holding ``data/train``: 2 classes of 8 small JPEGs."""
    make_image_folder(tmp_path / "data" / "train", {"cat": 8, "dog": 8}, sizes=(40, 64))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_snippet(code: str) -> dict:
    """Runs ``PRELUDE`` + ``code`` in this process (torch imported once) and returns its names."""
    names: dict = {}
    exec(compile(PRELUDE + code, "<snippet>", "exec"), names)
    return names


# -- the snippets, as written ------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:This DataLoader will create 8 worker processes")  # the "before" code, as written
@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_the_swap_snippets_run_and_give_what_the_page_says(workdir, page):
    before = run_snippet(block(page, "python", "torch.utils.data.DataLoader(dataset"))
    images, labels = next(iter(before["loader"]))
    after = run_snippet(block(page, "python", 'gpupipe.loader("data/train", "train"'))
    loader = after["loader"]
    assert loader.classes == before["dataset"].classes == ["cat", "dog"]
    assert loader.class_to_idx == before["dataset"].class_to_idx and len(loader) == len(before["loader"]) == 1
    gp_images, gp_labels = next(iter(loader))
    # "images (256, 3, 224, 224) float32, ImageNet-normalised ... labels (256,) int64": 16 images here
    assert gp_images.shape == images.shape == (16, 3, 224, 224) and gp_images.dtype == torch.float32
    assert gp_labels.shape == labels.shape == (16,) and gp_labels.dtype == torch.int64
    assert sorted(gp_labels.tolist()) == sorted(labels.tolist()) == [0] * 8 + [1] * 8
    assert gp_images.min() < -1.5 and gp_images.max() > 1.5, "normalised with ImageNet's mean and std"


def test_the_op_by_op_snippet_is_the_train_preset(workdir):
    ops = run_snippet("import gpupipe\n" + block("docs/index.md", "python", "from gpupipe import Decode"))
    loader = ops["loader"]
    images, labels = next(iter(loader))
    assert images.shape == (16, 3, 224, 224) and labels.shape == (16,)
    assert loader.spec == gpupipe.loader("data/train", "train", batch_size=16).spec, "the same pipeline"


def test_the_torchvision_page_snippet_runs_under_torchrun(workdir):
    """Its ``DistributedSampler`` needs a process group, as in the ImageNet example it comes from: one rank of
    gloo here, in a subprocess (a process group is process-wide)."""
    code = PRELUDE + textwrap.dedent("""
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
    """) + block("docs/torchvision.md", "python", "from gpupipe import DataLoader") + textwrap.dedent("""
        train_sampler.set_epoch(1)
        images, labels = next(iter(train_loader))
        print(type(train_loader).__module__, tuple(images.shape), labels.dtype, len(train_loader))
        dist.destroy_process_group()
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=workdir, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "gpupipe.loading.loader (16, 3, 224, 224) torch.int64 1", proc.stdout


def test_the_pipelines_page_snippets(workdir):
    ops = run_snippet("ops = " + block("docs/pipelines.md", "python", "gpupipe.presets.train(224"))["ops"]
    assert [type(op).__name__ for op in ops] == ["Decode", "RandomResizedCrop", "HorizontalFlip", "RandAugment",
                                                 "ColorJitter", "RandomErasing", "Normalize", "MixUp", "CutMix"]
    assert [type(op).__name__ for op in gpupipe.presets.train(224, auto_augment="trivial")][3] == "TrivialAugment"
    with pytest.raises(ValueError) as err:  # the page's first paragraph quotes this message
        gpupipe.HorizontalFlip(1.5)
    assert f"ValueError: {err.value}" in " ".join((ROOT / "docs/pipelines.md").read_text().split())
    with pytest.raises(ValueError, match=r"cannot be batched: end its geometry with"):  # "... Resize(256) ... refused"
        gpupipe.loader("data/train", [gpupipe.Decode(), gpupipe.Resize(256)], batch_size=4)


def test_the_refusal_the_torchvision_page_shows_is_the_one_raised():
    from torchvision import transforms

    shown = block("docs/torchvision.md", "text", "cannot compile").splitlines()
    jitter = transforms.Compose([transforms.ColorJitter(0.4, 0.4, 0.4, 0.1)])
    transform = transforms.Compose([transforms.RandomResizedCrop(224), transforms.Lambda(lambda x: x),
                                    transforms.ToTensor(), jitter])
    with pytest.raises(gpupipe.UnsupportedTransform) as err:
        gpupipe.from_torchvision(transform)
    raised = str(err.value).splitlines()
    assert len(raised) == len(shown)
    for line, want in zip(raised, shown):
        assert line.startswith(want.removesuffix("...").removesuffix(", ...").rstrip()), (line, want)


def test_the_bench_page_autocast_snippet(workdir):
    code = textwrap.dedent("""
        device = torch.device("cpu")
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 2))
        criterion = torch.nn.CrossEntropyLoss()
        images, labels = torch.randn(4, 3, 8, 8), torch.tensor([0, 1, 0, 1])
    """) + block("docs/bench.md", "python", "gpupipe.autocast_dtype(device)")
    names = run_snippet(code)
    assert names["dtype"] in (torch.float32, torch.bfloat16) and names["loss"].ndim == 0


def test_the_packing_page_commands_run_as_written(workdir, capsys):
    commands = block("docs/packing.md", "bash", "python -m gpupipe.pack").splitlines()
    assert len(commands) == 2
    for command in commands:
        argv = command.split()
        assert argv[:3] == ["python", "-m", "gpupipe.pack"]
        assert pack_main(argv[3:]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "packed 16 images into 1 shard" in out and "packed/train: OK" in out
    loader = gpupipe.loader("packed/train", "val", batch_size=16, shuffle=False)
    assert loader.classes == ["cat", "dog"] and len(loader) == 1


def test_the_quickstarts_name_extras_that_exist():
    pyproject = (ROOT / "pyproject.toml").read_text()
    for page in ("README.md", "docs/index.md"):
        for code in blocks(page, "bash"):
            for extra in re.findall(r'pip install -e "\.\[(\w+)\]"', code):
                assert re.search(rf"^{extra} = \[", pyproject, flags=re.M), (page, extra)


# -- a newcomer's mistakes ---------------------------------------------------------------------------------------


def _pack_error(argv: list, capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        pack_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


def test_pack_with_no_arguments_says_what_it_needs(capsys):
    assert "SRC and DST are required (or --verify DST)" in _pack_error([], capsys)


@pytest.mark.parametrize("typo, meant", [("--max_size", "--max-size"), ("--shardsize", "--shard-size"),
                                         ("--on-errors", "--on-error"), ("--verfy", "--verify")])
def test_a_mistyped_pack_flag_names_the_flag_meant(capsys, typo, meant):
    err = _pack_error(["src", "dst", typo, "2"] if typo != "--verfy" else [typo, "dst"], capsys)
    assert f"unrecognized arguments: {typo}" in err and f"(did you mean {meant}?)" in err, err


@pytest.mark.parametrize("argv, message", [
    (["--batchsize", "8"], "unrecognized arguments: --batchsize 8 (did you mean --batch-size?)"),
    (["--thorogh"], "unrecognized arguments: --thorogh (did you mean --thorough?)"),
    (["--backends", "dali_cpu"], "--backends: unknown backend 'dali_cpu' (did you mean 'dali-cpu'?)"),
    (["--backends", "torchvison,baseline"], "unknown backend 'torchvison' (did you mean 'torchvision'?)"),
])
def test_a_mistyped_bench_flag_or_backend_names_the_one_meant(capsys, argv, message):
    assert bench_main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_an_unknown_flag_far_from_any_is_named_without_a_guess(capsys):
    assert bench_main(["--zzzzzz"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --zzzzzz" in err and "did you mean" not in err, err


def test_a_mistyped_preset_names_the_one_meant(workdir):
    with pytest.raises(ValueError, match=r"unknown preset 'trian' \(did you mean 'train'\?\)"):
        gpupipe.loader("data/train", "trian", batch_size=4)
    with pytest.raises(ValueError, match=r"unknown preset 'imagenet'; choose one of"):
        gpupipe.presets.get("imagenet")  # close to none: no guess


def _help(entry, capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        entry(["--help"])
    assert exit_.value.code in (0, None)
    return capsys.readouterr().out


def test_both_helps_show_examples_and_where_the_cache_really_is(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUPIPE_CACHE", str(tmp_path / "my-cache"))
    bench = _help(bench_main, capsys)
    pack = _help(pack_args, capsys)
    for text, command in ((bench, "python -m gpupipe.bench"), (pack, "python -m gpupipe.pack")):
        assert "examples:" in text and f"\n  {command} " in text, text
    flat = " ".join(bench.split())
    assert str(tmp_path / "my-cache") in "".join(bench.split()), "--cache-dir's default is the folder it will use"
    assert "--backends dali-cpu,torchvision" in flat and "--data" in flat
    flat = " ".join(pack.split())
    assert "--verify packed/train" in flat and "--max-size 256" in flat
    assert "under torchrun, the cores divided by the ranks on the node" in flat, "--workers' default, as it is"
    assert str(tmp_path / "my-cache") in "".join(pack.split()), "--staging's default is under the cache folder it uses"


def test_pack_lists_the_bad_inputs_it_skipped_on_the_terminal(workdir, capsys):
    (workdir / "data" / "train" / "cat" / "empty.jpg").write_bytes(b"")
    (workdir / "data" / "train" / "dog" / "notes.jpg").write_text("not an image")
    truncated = (workdir / "data" / "train" / "cat" / "img_000.jpg").read_bytes()[:200]
    (workdir / "data" / "train" / "cat" / "cut.jpg").write_bytes(truncated)
    assert pack_main(["data/train", "packed", "--workers", "1", "-q"]) == 0
    captured = capsys.readouterr()
    assert "packed 16 images into 1 shard" in captured.out and "skipped 3" in captured.out
    listed = [line for line in captured.err.splitlines() if line.startswith("skipped ")]
    assert len(listed) == 3, captured.err
    for name, reason in (("empty.jpg", "empty file (0 bytes)"), ("notes.jpg", "not an image"), ("cut.jpg", "")):
        assert any(name in line and reason in line for line in listed), (name, listed)


def test_pack_lists_at_most_ten_skipped_inputs_then_counts_the_rest(workdir, capsys):
    for i in range(12):
        (workdir / "data" / "train" / "cat" / f"empty{i:02d}.jpg").write_bytes(b"")
    assert pack_main(["data/train", "packed", "--workers", "1", "-q"]) == 0
    err = capsys.readouterr().err
    assert len([line for line in err.splitlines() if line.startswith("skipped ")]) == 10, err
    assert "... and 2 more: every one with its reason in packed/manifest.json" in err, err


def test_a_clean_pack_says_nothing_was_skipped(workdir, capsys):
    assert pack_main(["data/train", "packed", "--workers", "1", "-q"]) == 0
    captured = capsys.readouterr()
    assert "skipped 0" not in captured.out and "nothing skipped" in captured.out, captured.out
    assert "skipped " not in captured.err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a GPU")
def test_the_bench_says_why_it_skips_dali_on_a_cpu_machine(caplog):
    from gpupipe.bench.args import choose_backends

    with caplog.at_level("INFO", logger="gpupipe.bench"):
        names = choose_backends("all", on_gpu=False)
    assert "dali" not in names and names[0] == "baseline"
    assert "skipping backend 'dali': it needs a CUDA GPU, which this machine lacks (use dali-cpu)" in caplog.text


def test_the_last_line_of_a_loaders_only_bench_has_no_empty_verdict():
    from gpupipe.bench.advice import winner_line

    def loader(median, low, high):
        return {"loader": {"images_per_s": median, "min": low, "max": high, "batches": []}}

    for results in ({"dali-cpu": loader(1243.0, 1200.0, 1300.0), "torchvision": loader(1146.0, 1000.0, 1150.0)},
                    {"dali-cpu": loader(1243.0, 1200.0, 1300.0), "torchvision": loader(1146.0, 1100.0, 1250.0)},
                    {"torchvision": loader(1146.0, 1100.0, 1250.0)}):
        line = winner_line({"results": results, "settings": {}})
        assert line.startswith("fastest backend for loading (training not measured) on this machine: ")
        assert "; -" not in line and not line.endswith("-"), line


@pytest.mark.parametrize("argv, message", [
    (["--bakend", "torchvision"], "unrecognized arguments: --bakend torchvision (did you mean --backend?)"),
    (["--bakend=torchvision"], "unrecognized arguments: --bakend=torchvision (did you mean --backend?)"),
    (["--epochs", "1", "extra"], "unrecognized arguments: extra"),
])
def test_gpupipe_cli_parsers_name_the_flag_meant(capsys, argv, message):
    """``gpupipe.cli.ArgumentParser``, which the examples and a user's own script use."""
    parser = gpupipe.cli.ArgumentParser(prog="train.py")
    parser.add_argument("--backend")
    parser.add_argument("--epochs", type=int)
    with pytest.raises(SystemExit):
        parser.parse_args(argv)
    err = capsys.readouterr().err
    assert err == f"error: {message} (see train.py --help)\n", err


def test_the_bench_on_a_folder_with_bad_images_names_them_before_measuring(workdir, capsys):
    (workdir / "data" / "train" / "cat" / "empty.jpg").write_bytes(b"")
    (workdir / "data" / "train" / "dog" / "notes.jpg").write_text("not an image")
    argv = ["--data", "data/train", "--no-train", "--backends", "baseline,torchvision", "--repeats", "1",
            "--steps", "1", "--warmup", "0", "--batch-size", "2", "--out", "out"]
    assert bench_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: --data: 2 of 18 files cannot be used"), err
    assert "empty.jpg: empty file (0 bytes)" in err and "python -m gpupipe.pack data/train" in err, err
    assert not (workdir / "out").exists(), "nothing measured"


def test_the_loader_page_stats_snippet_prints_what_its_comment_shows(workdir, capsys):
    code = block("docs/loader.md", "python", "loader.stats(reset=True)")
    shown = re.search(r"^# (\d+ batches, \d+ images/s, waiting for data \d+% of the time: .*)$", code, flags=re.M)
    assert shown, code
    names = {"loader": gpupipe.loader("data/train", batch_size=4), "train_step": lambda images, labels: None}
    exec(compile(code, "<loader.md>", "exec"), names)
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 1, printed  # step 0 of 4 batches
    assert re.fullmatch(r"\d+ batch(es)?, [\d.]+ images/s, waiting for data \d+% of the time: .+", printed[0]), printed


def test_verify_of_a_path_that_does_not_exist_is_an_argument_error(workdir, capsys):
    """A mistyped DST is named as missing (exit 2), not reported as a pack that failed its check (exit 1)."""
    with pytest.raises(SystemExit) as exit_:
        pack_main(["--verify", "packed/trian"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err == "error: --verify: packed/trian does not exist (see python -m gpupipe.pack --help)\n", err


def test_the_bench_output_opens_with_what_it_measured():
    from gpupipe.bench.report import measured_line

    settings = {"model": "shufflenet_v2_x0_5", "batch_size": 32, "image_size": 224, "steps": 20, "train_steps": 6,
                "warmup": 10, "train_warmup": 3, "repeats": 3, "device": "cpu", "measure_training": True}
    report = {"settings": settings, "data": {"images": 1000, "classes": 10}, "amp": {"dtype": "float32"},
              "machine": {"label": "cpu-2core"}}
    assert measured_line(report) == (
        "measured on cpu-2core, 1000 images in 10 classes, batch 32 at 224 px: each loader alone (20 batches after "
        "10 of warm-up), a shufflenet_v2_x0_5 training loop in float32 (6 steps after 3 of warm-up) and the same "
        "loop on one batch kept on the device (its ceiling); 3 repeats of each, interleaved; medians (min-max):")
    report["settings"].update(measure_training=False, repeats=1, steps=2, warmup=1)
    assert measured_line(report) == (
        "measured on cpu-2core, 1000 images in 10 classes, batch 32 at 224 px: each loader alone (2 batches after "
        "1 of warm-up); 1 repeat of each, interleaved; medians (min-max):")


def test_the_bench_given_a_list_file_says_what_it_reads_instead(workdir, capsys):
    """A list file is a loader source, but not the bench's: one line saying how to bench it, before any work."""
    (workdir / "files.txt").write_text("".join(f"{p} 0\n" for p in sorted((workdir / "data").rglob("*.jpg"))))
    assert bench_main(["--data", "files.txt", "--no-train", "--out", "out"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == ("error: --data: files.txt is a list file; the bench reads an image folder (root/<class>/<image>) "
                   "or a pack: pack it first (python -m gpupipe.pack files.txt PACKED) and pass --data PACKED"), err
    assert not (workdir / "out").exists()


def test_a_mistyped_backend_of_the_loader_names_the_one_meant(tmp_path):
    import gpupipe

    with pytest.raises(ValueError, match=r"unknown backend 'dali_cpu' \(did you mean 'dali-cpu'\?\); choose 'auto'"):
        gpupipe.loader(str(tmp_path), batch_size=2, backend="dali_cpu")
    with pytest.raises(ValueError, match=r"unknown backend 'gpu'; choose 'auto'"):
        gpupipe.loader(str(tmp_path), batch_size=2, backend="gpu")


def test_a_dataloader_argument_given_to_the_loader_says_what_to_pass(tmp_path):
    import gpupipe

    with pytest.raises(TypeError, match=r"'num_workers': that is torch DataLoader's argument; gpupipe chooses its "
                                        r"threads, num_threads= sets them \(gpupipe.DataLoader takes"):
        gpupipe.loader(str(tmp_path), batch_size=2, num_workers=8)
    with pytest.raises(TypeError, match=r"'batchsize' \(did you mean 'batch_size'\?\)$"):
        gpupipe.loader(str(tmp_path), batchsize=2)


def test_stats_count_one_batch_as_one_batch(image_folder):
    import gpupipe

    loader = gpupipe.loader(str(image_folder), "val", batch_size=2, backend="torchvision", device="cpu",
                            num_threads=0)
    next(iter(loader))
    assert str(loader.stats()).startswith("1 batch, ")
