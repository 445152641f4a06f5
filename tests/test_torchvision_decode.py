"""The torchvision backend's JPEG decoding: TorchCodec where installed, torchvision.io otherwise, the same
pixels either way, and no change to the process's warning filters (on import or per call)."""

import io
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

from gpupipe.backends.torchvision import dataset


def rotated_jpeg() -> torch.Tensor:
    """A 20x40 JPEG whose EXIF orientation (6) turns it into 40x20."""
    img = Image.fromarray((np.random.default_rng(0).random((20, 40, 3)) * 255).astype(np.uint8))
    exif = img.getexif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    img.save(buf, "JPEG", exif=exif.tobytes(), quality=95)
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)


def test_importing_the_backend_leaves_the_warning_filters_alone():
    code = ("import warnings, torch, torchvision, torchvision.io, gpupipe, torch._dynamo; before = list(warnings.filters); "
            "import gpupipe.backends.torchvision.dataset; "
            "import gpupipe.backends.torchvision.backend; print(before == list(warnings.filters))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"


def test_decoding_leaves_the_filters_alone_and_shows_the_caller_no_deprecation():
    before = list(warnings.filters)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        image = dataset.decode(rotated_jpeg(), "x.jpg")
    assert tuple(image.shape) == (3, 40, 20) and image.dtype == torch.uint8
    assert [w for w in seen if "decoding and encoding capabilities" in str(w.message)] == []
    assert list(warnings.filters) == before


def test_without_torchcodec_torchvision_io_decodes(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchcodec", None)
    monkeypatch.setitem(sys.modules, "torchcodec.decoders", None)
    decode, name = dataset.jpeg_decoder()
    assert name == "torchvision.io"
    assert tuple(decode(rotated_jpeg()).shape) == (3, 40, 20)


def test_torchcodec_gives_torchvisions_pixels():
    pytest.importorskip("torchcodec.decoders")
    decode, name = dataset.jpeg_decoder()
    assert name == "torchcodec" and dataset.JPEG_DECODER == "torchcodec"
    data = rotated_jpeg()
    assert torch.equal(decode(data), dataset._torchvision_jpeg(data))


def test_a_corrupt_jpeg_is_a_decode_error_naming_the_file():
    data = rotated_jpeg()[:200]
    with pytest.raises(Exception) as info:
        dataset.decode(data, "broken.jpg")
    assert "broken.jpg" in str(info.value)


@pytest.mark.parametrize("decoder", ["torchvision.io", "torchcodec"])
def test_a_corrupt_jpegs_reason_is_the_decoders_words_not_its_source_path(monkeypatch, decoder):
    """A JPEG whose Huffman table is garbage: the reason says what is wrong, without the decoder's C++ function,
    source file and line (``decode_jpeg, /__w/vision/.../decode_jpeg.cpp:171, Bogus Huffman table``)."""
    if decoder == "torchcodec":
        pytest.importorskip("torchcodec.decoders")
        monkeypatch.setattr(dataset, "_JPEG", dataset.jpeg_decoder()[0])
    else:
        monkeypatch.setattr(dataset, "_JPEG", dataset._torchvision_jpeg)
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), np.uint8)).save(buf, "JPEG")
    data = bytearray(buf.getvalue())
    data[200:400] = b"\xff" * 200
    with pytest.raises(dataset.DecodeError) as info:
        dataset.decode(torch.frombuffer(data, dtype=torch.uint8), "broken.jpg")
    reason = info.value.skipped.reason
    assert reason and ".cpp" not in reason and "/" not in reason and "decode_jpeg" not in reason, reason
    assert "huffman" in reason.lower(), reason
