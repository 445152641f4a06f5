"""The target handlers on their own: packed and read back, padded, moved, and checked against classes.

Every backend and the packer go through these handlers (the loader-level tests in test_segmentation,
test_detection, test_multilabel and test_pack hold them to parity); here each piece is held to its
exact values."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import gpupipe
from gpupipe.plan.spec import build_spec
from gpupipe.backends.torchvision.targets import TARGETS as TORCHVISION_TARGETS
from gpupipe.targets import HANDLERS, TargetKind, handler
from gpupipe.targets.base import check_label_rows
from gpupipe.targets.boxes import BOX_PADDING, PADDING_LABEL, compact, pad, unpad

#: One sample's manifest value per kind, as the packer records it (masks: none, the member holds it).
VALUES = {
    TargetKind.LABEL: 3,
    TargetKind.MULTI_LABEL: [0, 2],
    TargetKind.BOXES: ([[1.0, 2.0, 5.0, 6.0], [0.0, 0.0, 3.0, 3.0]], [1, 0]),
}


@pytest.mark.parametrize("kind", list(VALUES), ids=lambda k: k.value)
def test_a_packed_target_reads_back_and_its_member_agrees(kind):
    target = handler(kind)
    payload, value = target.pack(VALUES[kind], (10, 10), (10, 10), settings=None)
    shard = target.manifest_rows([value, value])
    assert set(shard) == set(target.manifest_fields)
    assert target.rows_problem(shard, 2) is None
    assert target.member_problem(lambda: payload, shard, 1) == ""
    columns = target.unpack(shard, 2)
    assert len(next(iter(columns.values()))) == 2
    assert target.rows_problem(shard, 3) is not None, "a shard whose rows do not match its samples is named"
    if kind is TargetKind.LABEL:
        assert target.member_problem(lambda: payload, {"labels": [4, 4]}, 0) == \
            "class differs from the manifest's label 4"
    else:
        assert target.member_problem(lambda: b"not json", shard, 0).startswith("unreadable target")


def test_a_packed_mask_is_not_read_to_check_it():
    """Masks have no manifest rows to compare with: --verify does not read their PNGs."""
    def read():
        raise AssertionError("read")

    assert handler(TargetKind.MASK).member_problem(read, {}, 0) == ""


def test_boxes_are_scaled_with_their_image_when_packed():
    target = handler(TargetKind.BOXES)
    payload, (boxes, labels) = target.pack(([[10.0, 20.0, 30.0, 40.0]], [2]), (100, 200), (50, 100), settings=None)
    assert boxes == [[5.0, 10.0, 15.0, 20.0]] and labels == [2]
    assert json.loads(payload) == {"boxes": boxes, "labels": labels}


def test_padding_puts_real_boxes_first_and_unpads_exactly():
    rows = [(torch.tensor([[1.0, 1.0, 2.0, 2.0]]), torch.tensor([5])), (torch.zeros(0, 4), torch.zeros(0, dtype=torch.long))]
    batch = pad([b for b, _ in rows], [lbl for _, lbl in rows])
    assert batch["boxes"].shape == (2, 1, 4) and batch["labels"].tolist() == [[5], [PADDING_LABEL]]
    assert (batch["boxes"][1] == BOX_PADDING).all()
    back = unpad(batch)
    assert len(back) == 2 and back[0][1].tolist() == [5] and len(back[1][1]) == 0
    labels = torch.tensor([[PADDING_LABEL, 3, PADDING_LABEL], [PADDING_LABEL, PADDING_LABEL, PADDING_LABEL]])
    boxes = torch.arange(24, dtype=torch.float32).view(2, 3, 4)
    packed_boxes, packed_labels = compact(boxes, labels)
    assert packed_labels.tolist() == [[3], [PADDING_LABEL]] and packed_boxes[0, 0].tolist() == [4.0, 5.0, 6.0, 7.0]


def test_boxes_move_by_the_ops_map_and_an_iou_crop_drops_them_by_their_centre():
    target = TORCHVISION_TARGETS.of(handler(TargetKind.BOXES))
    spec = build_spec([gpupipe.Decode(), gpupipe.Resize((8, 8))])
    boxes = np.array([[0.0, 0.0, 4.0, 4.0], [6.0, 6.0, 10.0, 10.0]], np.float32)
    state = (boxes.copy(), boxes.copy(), np.array([0, 1]))
    half = {"affine": np.array([[0.5, 0, 0], [0, 0.5, 0]]), "size": np.array([4, 4])}
    moved, raw, _ = target.move(state, None, half, gpupipe.Resize((4, 4)), spec)
    assert moved.tolist() == [[0, 0, 2, 2], [3, 3, 4, 4]], "scaled, then clipped to the 4x4 image"
    assert raw[1].tolist() == [3, 3, 5, 5], "the unclipped copy keeps the visible share"
    window = {"top": 0, "left": 0, "height": 5, "width": 5, "affine": np.array([[1.0, 0, 0], [0, 1.0, 0]]),
              "size": np.array([5, 5])}
    kept, _, _ = target.move(state, None, window, gpupipe.RandomIoUCrop(), spec)
    assert kept[0].tolist() == [0, 0, 4, 4] and kept[1].tolist() == [0, 0, 0, 0], "centre (8, 8) is outside"


def test_masks_follow_the_kernel_with_nearest_sampling_and_ignore_fill():
    target = TORCHVISION_TARGETS.of(handler(TargetKind.MASK))
    spec = build_spec([gpupipe.Decode(), gpupipe.Resize((4, 4))], ignore_index=200)
    asked = []

    def kernel(x, *, fill, nearest):
        asked.append((fill, nearest))
        return x + 1

    assert target.move(torch.zeros(1, 2, 2), kernel, {}, gpupipe.Resize((4, 4)), spec).sum() == 4
    assert asked == [(200, True)]
    stacked = target.stack([torch.ones(4, 4, dtype=torch.uint8), None], spec)
    assert stacked.shape == (2, 4, 4) and (stacked[1] == 200).all(), "a failed sample's slot is all ignore_index"


def test_label_rows_out_of_range_name_their_sample():
    check_label_rows([np.array([0, 1]), np.array([], np.int64)], 2, "X", ["a.jpg", "b.jpg"])
    with pytest.raises(ValueError, match=r"X: label 2 of 'c\.jpg' is outside the class range 0\.\.1"):
        check_label_rows([np.array([0]), np.array([], np.int64), np.array([1, 2])], 2, "X", ["a", "b", "c.jpg"])


def test_image_level_kinds_are_batched_on_the_host():
    source = gpupipe.FileList([("/x/a.jpg", "cat"), ("/x/b.jpg", ["cat", "dog"])])
    assert source.kind is TargetKind.MULTI_LABEL
    multi = handler(TargetKind.MULTI_LABEL).batch(source, [1, 0])
    assert multi.tolist() == [[1.0, 1.0], [1.0, 0.0]] and multi.dtype == torch.float32
    labels = gpupipe.FileList([("/x/a.jpg", 1), ("/x/b.jpg", 0)])
    assert handler(TargetKind.LABEL).batch(labels, np.array([1, 0, 0])).tolist() == [0, 1, 1]
    assert [h.moves_with_pixels for h in HANDLERS.values()] == [False, False, True, True]
