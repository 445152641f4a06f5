"""``GPUPIPE_DALI_OUTPUTS=host`` (the GPU proof's diagnostic for where ``next()`` waits): DALI's outputs taken
synchronised with the host, as DALI's own iterator takes them, instead of bound to the consumer's stream; the
batches are the same either way."""

import pytest
import torch

import gpupipe
from helpers import DALI_BACKEND_DEVICES, make_image_folder, needs_dali

pytestmark = needs_dali


@pytest.mark.parametrize("backend, device", DALI_BACKEND_DEVICES)
def test_host_synchronised_outputs_give_the_same_batches(tmp_path, backend, device, monkeypatch):
    make_image_folder(tmp_path / "data", {"a": 10, "b": 10}, sizes=(40, 60), seed=2)
    batches = {}
    for outputs in ("stream", "host"):
        monkeypatch.setenv("GPUPIPE_DALI_OUTPUTS", outputs)
        loader = gpupipe.loader(tmp_path / "data", gpupipe.presets.train(32), batch_size=8, backend=backend,
                                device=device, seed=4, num_threads=1)
        batches[outputs] = [(x.cpu().clone(), y.cpu().clone()) for _ in range(2) for x, y in loader]
    assert len(batches["host"]) == len(batches["stream"]) == 6
    for (x, y), (hx, hy) in zip(batches["stream"], batches["host"], strict=True):
        assert torch.equal(y, hy)
        assert torch.equal(x, hx)
