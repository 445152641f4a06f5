"""Review of the round ending 2026-12-06: what a red-team read of the whole change found."""

from __future__ import annotations

import warnings

import pytest
import torch

import gpupipe
from gpupipe.loading.epochs import LeftPass
from helpers import flat_folder

PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return flat_folder(tmp_path_factory.mktemp("review") / "data", 15)  # 5 batches of 3


def _fit_then_save(folder, tmp_path, **limits) -> list[str]:
    """A Lightning fit over a loader of 5 batches an epoch, then ``trainer.save_checkpoint`` (Lightning's docs);
    the ``LeftPass`` warnings said."""
    import lightning as L

    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def training_step(self, batch, index):
            return self.layer(torch.ones(1, 1)).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    loader = gpupipe.loader(folder, PIPELINE, batch_size=3, backend="torchvision", num_threads=0, seed=1)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **limits,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(Model(), train_dataloaders=loader)
        trainer.save_checkpoint(tmp_path / "last.ckpt")
    return [str(w.message) for w in caught if issubclass(w.category, LeftPass)]


@pytest.mark.timeout(120)
def test_no_left_pass_warning_where_lightnings_limit_train_batches_ended_the_epoch(folder, tmp_path):
    """Lightning's ``limit_train_batches`` ends each epoch after 2 of 5 batches, and counts the epoch done: the
    state (the next epoch, from its start) is what a resume from the checkpoint needs, so nothing is to be said."""
    assert _fit_then_save(folder, tmp_path, limit_train_batches=2, max_epochs=1) == []


@pytest.mark.timeout(120)
def test_left_pass_still_warned_where_max_steps_stopped_lightning_inside_an_epoch(folder, tmp_path):
    said = _fit_then_save(folder, tmp_path, max_steps=3, max_epochs=5)
    assert len(said) == 1 and "left after 3 of 5 batches" in said[0], said


def test_a_rank_left_waiting_in_load_state_dicts_exchange_is_told_what_the_others_must_call(monkeypatch, caplog):
    """``load_state_dict`` exchanges among the ranks (``agreement.load_alike``): a rank whose peers never load a
    state waits there, and its notice must name ``load_state_dict``, not the building of a loader."""
    import torch.distributed as dist

    from gpupipe.loading import agreement

    store = dist.HashStore()  # rank 1 never arrives
    monkeypatch.setattr(dist.distributed_c10d, "_get_default_store", lambda: store)
    monkeypatch.setattr(dist, "get_rank", lambda: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(dist, "all_gather_object", lambda out, payload: out.__setitem__(slice(None), [payload] * 2))
    monkeypatch.setattr(agreement, "WAIT_NOTICE_S", 0.2)
    with caplog.at_level("WARNING", logger="gpupipe.loader"):
        agreement.load_alike(lambda: (1, 2), (0, 2))
    assert "rank 0 waits for rank 1 to call load_state_dict" in caplog.text, caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="gpupipe.loader"):
        agreement.check_ranks_agree(["a.jpg"], gpupipe.LoaderConfig(batch_size=3), (0, 2))
    assert "rank 0 waits for rank 1 to build the same loader" in caplog.text, caplog.text


def test_a_dark_16_bit_png_is_scaled_as_dali_scales_it_under_a_pillow_that_opens_it_as_mode_i(monkeypatch, tmp_path):
    """pyproject allows pillow>=10; Pillow before 11 opens a 16-bit gray PNG in mode ``I`` (not ``I;16``), and
    ``to_rgb8`` kept a mode-``I`` image whose values are all under 256 as it was: 0..199 where DALI gives
    round(v * 255 / 65535), 0 or 1: the same file, other pixels, on the torchvision backend and in a pack."""
    import io

    import numpy as np
    from PIL import Image, PngImagePlugin

    from gpupipe.images import decode_rgb
    from gpupipe.pack.convert import ConvertSettings, convert_image

    values = (np.arange(24 * 20).reshape(24, 20) % 200).astype(np.uint16)
    out = io.BytesIO()
    Image.fromarray(values).save(out, "PNG")
    monkeypatch.setitem(PngImagePlugin._MODES, (16, 0), ("I", "I;16B"))  # Pillow 10's reading
    assert Image.open(io.BytesIO(out.getvalue())).mode == "I"
    want = (values.astype(np.int64) * 255 + 32767) // 65535
    got = decode_rgb(out.getvalue())
    assert got.shape == (24, 20, 3) and np.array_equal(got[..., 0], want), int(got.max())
    packed, *_ = convert_image(out.getvalue(), ConvertSettings())
    assert np.abs(np.asarray(Image.open(io.BytesIO(packed)).convert("L")).astype(int) - want).max() <= 2


def test_the_cache_key_drops_only_what_signs_a_url_never_what_selects_the_object():
    """A re-signed URL reads the same cached copy; a parameter that may select the object (even one whose name
    ``redact`` hides, such as ``object_key``) keeps its own entry: merging two objects would read the wrong tar."""
    from gpupipe.remote.urls import cache_key

    signed = "https://h/b/s.tar?versionId=3&X-Amz-Signature={}&X-Amz-Date={}&object_key=s-{}.tar"
    assert cache_key(signed.format("aa", "1", "0")) == cache_key(signed.format("bb", "2", "0"))
    assert cache_key(signed.format("aa", "1", "0")) != cache_key(signed.format("aa", "1", "1"))
    assert cache_key("https://u:pw@h/a.tar?token=1") != cache_key("https://u:pw@h/a.tar?token=2")
    assert cache_key("https://u:pw@h/a.tar?generation=1") == "https://h/a.tar?generation=1"


def test_an_option_without_help_whose_default_is_zero_shows_that_default():
    """``ArgumentParser`` gives an option without a help text ``(default: ...)``, but ``0 in (None, False)`` is
    true in Python: a default of 0 (``--warmup``, ``--seed``) was shown as no default at all."""
    import argparse

    from gpupipe.cli import ArgumentParser

    parser = ArgumentParser(prog="x", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("--scale", type=float, default=0.0)
    parser.add_argument("--quiet", action="store_true")
    shown = " ".join(parser.format_help().split())
    assert "--warmup WARMUP (default: 0)" in shown and "--scale SCALE (default: 0.0)" in shown, shown
    assert "--quiet (default" not in shown, shown
