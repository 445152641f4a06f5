"""Building DALI pipelines: a run's pipeline (reader + planned parameters + lowering) and the probe's.

The reader reads the run's samples; one ``external_source`` gives, per
iteration, the planned parameters the lowering reads (found once by
tracing the graph), the masks of a folder source (palette PNGs as their
indices) and the boxes of a detection source.
"""

from __future__ import annotations

import functools
import warnings
from typing import Callable, List, Optional

import numpy as np
import torch
from nvidia.dali import fn, pipeline_def, types

from ... import ops as O
from ...fileio import UnreadableFile
from ...images import palette_as_gray_png
from ...plan import Planner
from ...seeding import mix_int
from ...sources import FileSource, Source
from ...spec import PipelineSpec
from ...targets import TargetKind
from .. import DecoderSettings, RunConfig
from ..common import source_boxes
from .lifetime import track
from .lowering import Graph, Params, lower, quiet_auto_aug
from .readers import ReaderFiles, reader_for
from .recovery import Prober
from .run import BatchRef, Run


def decoder_kwargs(gpu: bool, settings: DecoderSettings) -> dict:
    """The image decoder's arguments: libjpeg's fancy chroma upsampling (as torchvision and PIL decode);
    on the GPU the hardware decoder's share and the preallocation hints."""
    kwargs = dict(device="mixed" if gpu else "cpu", output_type=types.RGB, jpeg_fancy_upsampling=True)
    if gpu:
        kwargs.update(hw_decoder_load=settings.hw_decoder_load, preallocate_width_hint=settings.width_hint,
                      preallocate_height_hint=settings.height_hint)
    return kwargs


def uses_conditionals(spec: PipelineSpec) -> bool:
    """nvidia.dali.auto_aug branches per sample, which needs DALI's conditionals."""
    return any(isinstance(op, (O.RandAugment, O.TrivialAugment)) for op in spec.ops)


class Pipelines:
    """Builds the pipelines of one backend.

    Args:
        source, spec, config: as the backend's.
        graph_spec: the spec the graph computes (uint8 output when dali-cpu feeds a GPU).
        gpu: decode with ``device="mixed"`` and run the image ops on the GPU.
        planner: draws the parameters.
        sizes: ``(N, 2)`` the samples' image sizes.
    """

    def __init__(self, source: Source, spec: PipelineSpec, graph_spec: PipelineSpec, config: RunConfig, *,
                 gpu: bool, planner: Planner, sizes: np.ndarray) -> None:
        self.source, self.spec, self.graph_spec, self.config, self.gpu = source, spec, graph_spec, config, gpu
        self.planner, self.sizes = planner, sizes
        self.reader = reader_for(source)
        self.masks_from_files = source.kind is TargetKind.MASK and isinstance(source, FileSource)
        self.param_names = self._used_params()
        self.content_sizes: dict = {}  # batch key -> (B, 2) unpadded sizes (detection targets)

    def run(self, refs: List[BatchRef]) -> Run:
        """A built pipeline reading ``refs`` in order."""
        indices = np.concatenate([r.indices for r in refs])
        held = self.source.hold(indices)  # remote tars: fetched, and kept until the run closes
        files = ReaderFiles()
        captured = {}

        @pipeline_def(enable_conditionals=uses_conditionals(self.spec))
        def graph():
            nodes = self.reader(self.source, indices, files)
            captured["expected"] = nodes.expected
            inputs = self._external(lambda info: self.inputs(refs[min(info.iteration, len(refs) - 1)]))
            return (*self._lower(nodes.encoded, nodes.mask, inputs), nodes.identity)

        try:
            with quiet_auto_aug():
                pipe = graph(batch_size=self.config.batch_size, num_threads=self.config.num_threads,
                             device_id=self.device_id(), seed=mix_int(self.config.seed) % (2**31),
                             exec_dynamic=True, prefetch_queue_depth=max(1, min(self.config.prefetch, len(refs))))
                pipe.build()
        except BaseException:
            files.close()
            held.release()
            raise
        track(pipe)
        files.built()

        def close() -> None:
            files.close()
            held.release()

        return Run(pipe, refs, check=functools.partial(self._check_order, expected=captured["expected"]),
                   on_close=close)

    def prober(self) -> Prober:
        """Runs suspect samples one at a time through the same graph (see :mod:`.recovery`)."""
        def read(index: int):
            image = self.source.read_bytes(index)
            mask = self.mask_bytes(index, strict=True) if self.source.kind is TargetKind.MASK else None
            return image, mask

        def prepare(suspect, data):
            (index, epoch, position), (image, mask) = suspect, data
            params = self.inputs(BatchRef(epoch, 0, np.array([index]), np.array([position]), 1))
            if self.masks_from_files:
                params[len(self.param_names)] = [mask]
            return [image], params, [mask]

        return Prober(self._probe_pipeline, read, prepare)

    def _probe_pipeline(self, prober: Prober):
        shard_masks = self.source.kind is TargetKind.MASK and not self.masks_from_files

        @pipeline_def(enable_conditionals=uses_conditionals(self.spec))
        def graph():
            encoded = fn.external_source(source=lambda info: prober.current[0], batch=True, batch_info=True)
            params = self._external(lambda info: prober.current[1])
            mask = fn.external_source(source=lambda info: prober.current[2], batch=True, batch_info=True) \
                if shard_masks else None
            return tuple(self._lower(encoded, mask, params))

        with quiet_auto_aug():
            pipe = graph(batch_size=1, num_threads=1, device_id=self.device_id(), seed=0, exec_dynamic=False,
                         exec_pipelined=False, exec_async=False, prefetch_queue_depth=1)
            pipe.build()
        return track(pipe)

    def _used_params(self) -> List:
        """The planned parameters the lowering reads (traced once in a graph that is never built)."""
        dummy = self.planner.plan(0, np.zeros(1, np.int64), np.array([[64, 64]]), [np.zeros((0, 4), np.float32)])
        self.param_names = [(j, name) for j, step in enumerate(dummy.steps) for name in sorted(step)]
        used = []

        class Recording(Params):
            def __getitem__(self, key):
                used.append(key)
                return super().__getitem__(key)

        @pipeline_def(enable_conditionals=uses_conditionals(self.spec))
        def trace():
            inputs = self._external(lambda info: None)
            n = len(self.param_names)
            g = Graph(self.graph_spec, Recording(self.param_names, inputs[:n]), gpu=False, decoder={})
            g.encoded = fn.external_source(name="encoded")
            if self.source.kind is TargetKind.MASK:
                g.mask = fn.external_source(name="mask")
            if self.source.kind is TargetKind.BOXES:
                g.boxes = g.raw = inputs[n]
                g.box_labels = inputs[n + 1]
            return tuple(lower(g))

        with quiet_auto_aug(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The external source node")  # the trace feeds every parameter
            trace(batch_size=1, num_threads=1, device_id=None)
        return [key for key in self.param_names if key in set(used)]

    def _external(self, source: Callable):
        outputs = len(self.param_names) + (1 if self.masks_from_files else 0) + \
            (2 if self.source.kind is TargetKind.BOXES else 0)
        nodes = fn.external_source(source=source, batch=True, batch_info=True, num_outputs=outputs)
        return list(nodes) if isinstance(nodes, (list, tuple)) else [nodes]

    def _lower(self, encoded, mask, inputs) -> List:
        n = len(self.param_names)
        g = Graph(self.graph_spec, Params(self.param_names, inputs[:n]), gpu=self.gpu,
                  decoder=decoder_kwargs(self.gpu, self.config.decoder))
        g.encoded = encoded
        extra = list(inputs[n:])
        if self.source.kind is TargetKind.MASK:
            mask = fn.decoders.image(extra.pop(0) if mask is None else mask, device="cpu", output_type=types.ANY_DATA)
            g.mask = mask.gpu() if self.gpu else mask
        if self.source.kind is TargetKind.BOXES:
            g.boxes = g.raw = extra[0]
            g.box_labels = extra[1]
        return lower(g)

    def inputs(self, ref: BatchRef) -> List:
        """Batch ``ref``'s planned parameters (and masks or boxes), as the external source gives them."""
        boxes = source_boxes(self.source, ref.indices)
        plan = self.planner.plan(ref.epoch, ref.positions, self.sizes[ref.indices], boxes)
        out: List = []
        for j, name in self.param_names:
            values = plan.steps[j][name]
            out.append(np.ascontiguousarray(values, np.float32 if values.dtype.kind == "f" else np.int32))
        if self.masks_from_files:
            out.append([self.mask_bytes(int(i)) for i in ref.indices])
        if boxes is not None:
            self.content_sizes[ref.key] = self.planner.content_sizes(plan)
            out.append([np.asarray(b, np.float32).reshape(-1, 4) for b in boxes])
            out.append([np.asarray(self.source.box_labels[int(i)], np.int32) for i in ref.indices])
        return out

    def mask_bytes(self, index: int, strict: bool = False) -> np.ndarray:
        """A mask file's bytes, a palette PNG turned into its indices; an unreadable one gives no
        bytes (the decoder then fails, and the probe names the file) unless ``strict``."""
        try:
            data = self.source.read_mask_bytes(index).tobytes()
        except UnreadableFile:
            if strict:
                raise
            return np.zeros(0, np.uint8)
        return np.frombuffer(palette_as_gray_png(data), np.uint8)

    def device_id(self) -> Optional[int]:
        if not self.gpu:
            return None
        index = self.config.device.index
        return torch.cuda.current_device() if index is None else index

    def _check_order(self, identity, ref: BatchRef, consumed: int, expected) -> None:
        """DALI's reader must have read the planned samples: a mismatch would mean wrong targets."""
        bs = self.config.batch_size
        if isinstance(self.source, FileSource):
            got = np.asarray(identity.as_array()).ravel().tolist()
        else:
            got = [np.asarray(identity[i]).tobytes().decode("utf-8", "surrogateescape") for i in range(len(identity))]
        want = list(expected(consumed * bs, bs))
        if list(got) != want:
            raise RuntimeError(f"internal error: DALI read {got[:3]}... for batch {ref.key}, the plan says {want[:3]}...")
