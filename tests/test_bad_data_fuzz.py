"""Fuzzed JPEGs on every CPU backend: no crash, no hang, well-formed batches, intact files delivered.

Needs hypothesis (the ``test`` extra); a machine with plain pytest, such as the GPU machine
running ``pytest -m cuda``, skips this module instead of failing the whole collection.
"""

import os

import pytest
import torch

pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from helpers import CPU_BACKENDS, make_image_folder  # noqa: E402
from test_bad_data import CROP, make, reference_crop  # noqa: E402


def _mutations():
    flips = st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=12)
    return st.one_of(
        st.tuples(st.just("flip"), flips),
        st.tuples(st.just("cut"), st.floats(0.0, 1.0)),
        st.tuples(st.just("both"), flips),
    )


@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", CPU_BACKENDS)
@settings(max_examples=int(os.environ.get("GPUPIPE_FUZZ_EXAMPLES", "25")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(_mutations(), min_size=1, max_size=3))
def test_fuzzed_jpegs_never_crash_hang_or_give_malformed_batches(tmp_path_factory, backend, mutations):
    root = tmp_path_factory.mktemp("fuzz")
    written = make_image_folder(root, {"a": 3}, sizes=(40, 60), seed=5)
    data = written[0][0].read_bytes()
    for n, (kind, arg) in enumerate(mutations):
        mutated = bytearray(data)
        if kind in ("flip", "both"):
            for position, value in arg:
                mutated[2 + position % (len(mutated) - 2)] ^= value  # keep the JPEG signature
        if kind in ("cut", "both"):
            cut = arg if kind == "cut" else 0.5
            mutated = mutated[: max(3, int(len(mutated) * cut))]
        (root / "a" / f"fuzz_{n}.jpg").write_bytes(bytes(mutated))
    total = 3 + len(mutations)
    try:
        loader = make(root, backend, "cpu", on_error="skip")
    except ValueError as err:  # every file unusable
        assert "none of the" in str(err)
        return
    delivered = []
    for images, labels in loader:
        assert images.dtype == torch.uint8 and images.shape[1:] == (3, CROP, CROP)
        assert len(labels) == len(images) >= 1
        delivered.extend(images)
    assert len(delivered) == total - len([s for s in loader.skipped if not s.reason.startswith("cannot decode")]), \
        "one image per slot: the scan's bad files are left out, the ones failing later are replaced"
    for path, _ in written:  # every intact file is delivered, with its own pixels
        want = torch.from_numpy(reference_crop(path).copy()).permute(2, 0, 1).int()
        assert min((image.int() - want).abs().float().mean().item() for image in delivered) <= 0.5, path.name
