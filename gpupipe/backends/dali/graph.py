"""Building DALI pipelines: a run's pipeline (reader + planned parameters + lowering) and the probe's.

The reader reads the run's samples; one ``external_source`` gives, per
iteration, the planned parameters the lowering reads (found once by
tracing the graph; drawn a few batches ahead on a background thread and
packed, see ``params``), then what the target's lowering feeds
(``targets``, ``feed``: the masks of a folder
source, the boxes of a detection source). A packed mask is read by the
reader with its image instead.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from nvidia.dali import fn, pipeline_def

from ...loading.config import LoaderConfig
from ...plan import Planner
from ...plan.seeding import mix_int
from ...plan.spec import PipelineSpec
from ...sources import FileSource, Source
from ..base import Placement
from .augment_fused import POLICIES, host_params
from .calibrate import DEFAULT_LOAD, remembered_hw_decoder_load
from .decoder import decoder_kwargs, decoder_settings, warn_unlike_pil
from .forms import graph_form, lowering_form
from .lifetime import track
from .lowering import Graph, lower, quiet_auto_aug
from .params import ParamLayout, RunParams
from .readers import ReaderFiles, reader_for
from .recovery import Prober
from .run import BatchRef, Run, RunFailed
from .targets import TARGETS
from .torch_form import TorchTail

logger = logging.getLogger(__name__)

#: Batches read at each share when ``hw_decoder_load="auto"`` (two of them warm-up).
CALIBRATION_BATCHES = 10
#: The parameters a traced graph used, by what the trace reads (a policy's trace takes a second or more).
_TRACED: dict[tuple, frozenset] = {}


def uses_conditionals(spec: PipelineSpec, form: str) -> bool:
    """nvidia.dali.auto_aug's ``select`` (the policies' ``"cpu"`` form) branches per sample, which needs
    DALI's conditionals (their ``"gpu"`` form does not)."""
    return form == "cpu" and any(isinstance(op, POLICIES) for op in spec.ops)


class Pipelines:
    """Builds the pipelines of one backend.

    Args:
        source, spec, config, placement: as the backend's.
        graph_spec: the spec the graph computes (uint8 output when dali-cpu feeds a GPU).
        gpu: decode with ``device="mixed"`` and run the image ops on the GPU.
        planner: draws the parameters.
        sizes: ``(N, 2)`` the samples' image sizes.
        tail: the spec's trailing ops that run as torch ops after the graph (the ``"torch"`` form), whose
            parameters each planned ``BatchRef`` then carries (``tail_params``).
    """

    def __init__(
        self,
        source: Source,
        spec: PipelineSpec,
        graph_spec: PipelineSpec,
        config: LoaderConfig,
        placement: Placement,
        *,
        gpu: bool,
        planner: Planner,
        sizes: np.ndarray,
        tail: TorchTail | None = None,
    ) -> None:
        self.source, self.spec, self.graph_spec, self.config, self.gpu = source, spec, graph_spec, config, gpu
        self.placement, self.tail = placement, tail
        self.planner, self.sizes = planner, sizes
        self.decoder = decoder_settings(config, sizes, source.decode_as)
        warn_unlike_pil(source)
        self.reader = reader_for(source)
        self.target = TARGETS.of(source.target)  # the target's DALI lowering (refuses a kind it lacks)
        # what the external source feeds besides the parameters: the target, unless the reader reads it
        self.fed = 0 if self.reader.reads_target else self.target.feeds
        self.form = graph_form(lowering_form(gpu), gpu)
        self.layout = self._used_params()
        load = self.decoder.hw_decoder_load
        self.hw_decoder_load: float | None = None if load == "auto" else float(load)
        self._calibrating = threading.Lock()
        self._planner_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpupipe-plan")

    def close(self) -> None:
        """Stops the thread that plans parameters ahead."""
        self._planner_thread.shutdown(wait=False, cancel_futures=True)

    def run(self, refs: list[BatchRef], hw_decoder_load: float | None = None) -> Run:
        """A built pipeline reading ``refs`` in order (on the GPU with ``hw_decoder_load``, by default
        the loader's, measured on the first of these batches when it is ``"auto"``)."""
        if self.gpu and hw_decoder_load is None:
            hw_decoder_load = self._resolved_hw_decoder_load(refs)
        indices = np.concatenate([r.indices for r in refs])
        params = RunParams(refs, self._plan, self._planner_thread)
        held = self.source.hold(indices)  # remote tars: fetched, and kept until the run closes
        files = ReaderFiles()
        captured = {}

        def feed(info):
            k = min(info.iteration, len(refs) - 1)
            return params.feed(k) + self._feed(refs[k])

        @pipeline_def(enable_conditionals=uses_conditionals(self.graph_spec, self.form))
        def graph():
            nodes = self.reader(indices, files)
            captured["expected"] = nodes.expected
            inputs = self._external(feed)
            targets = [nodes.target] if nodes.target is not None else inputs[self.layout.outputs :]
            return (*self._lower(nodes.encoded, inputs, targets, hw_decoder_load), nodes.identity)

        try:
            with quiet_auto_aug():
                pipe = graph(
                    batch_size=self.config.batch_size,
                    num_threads=self.placement.threads,
                    device_id=self.device_id(),
                    seed=mix_int(self.config.seed) % (2**31),
                    exec_dynamic=True,
                    prefetch_queue_depth=max(1, min(self.config.prefetch, len(refs))),
                )
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

        return Run(
            pipe, refs, check=functools.partial(self._check_order, expected=captured["expected"]), on_close=close
        )

    def _resolved_hw_decoder_load(self, refs: list[BatchRef]) -> float:
        """The loader's ``hw_decoder_load``; ``"auto"`` is measured once, on the first batches read."""
        with self._calibrating:
            if self.hw_decoder_load is None:
                sample = refs[:CALIBRATION_BATCHES]
                if len(sample) < 3:
                    logger.info(
                        "hw_decoder_load=auto: %d batches are too few to measure; using %.2f", len(sample), DEFAULT_LOAD
                    )
                    self.hw_decoder_load = DEFAULT_LOAD
                else:
                    key = (
                        self.device_id(),
                        type(self.source).__name__,
                        len(self.source),
                        repr(self.spec.ops),
                        self.config.batch_size,
                        self.placement.threads,
                    )
                    try:
                        self.hw_decoder_load, _ = remembered_hw_decoder_load(key, functools.partial(self._rate, sample))
                    except RunFailed as failure:  # a bad file among them: the run will find and report it
                        logger.warning(
                            "hw_decoder_load=auto could not measure (%s); using %.2f", failure.error, DEFAULT_LOAD
                        )
                        self.hw_decoder_load = DEFAULT_LOAD
            return self.hw_decoder_load

    def _rate(self, refs: list[BatchRef], hw_decoder_load: float) -> float:
        """Images per second of ``refs`` read with ``hw_decoder_load``, after two warm-up batches."""
        run = self.run(refs, hw_decoder_load)
        try:
            run.next_batch()
            run.next_batch()
            started = time.perf_counter()
            for _ in range(len(refs) - 2):
                run.next_batch()
            return (len(refs) - 2) * self.config.batch_size / (time.perf_counter() - started)
        finally:
            run.close()

    def prober(self) -> Prober:
        """Runs suspect samples one at a time through the same graph (see ``recovery``); the
        probe reads each suspect's image (and its target, where that is read) itself."""

        def read(index: int):
            return self.source.read_bytes(index), self.target.feed(self.source, [index], strict=True)

        def prepare(suspect, data):
            (index, epoch, position), (image, feed) = suspect, data
            ref = BatchRef(epoch, 0, np.array([index]), np.array([position]), 1)
            return [image], self._plan([ref]) + feed

        return Prober(self._probe_pipeline, read, prepare)

    def _probe_pipeline(self, prober: Prober):
        @pipeline_def(enable_conditionals=uses_conditionals(self.graph_spec, self.form))
        def graph():
            encoded = fn.external_source(source=lambda info: prober.current[0], batch=True, batch_info=True)
            inputs = self._external(lambda info: prober.current[1], fed=self.target.feeds)  # no reader here
            return tuple(self._lower(encoded, inputs, inputs[self.layout.outputs :]))

        with quiet_auto_aug():
            pipe = graph(
                batch_size=1,
                num_threads=1,
                device_id=self.device_id(),
                seed=0,
                exec_dynamic=False,
                exec_pipelined=False,
                exec_async=False,
                prefetch_queue_depth=1,
            )
            pipe.build()
        return track(pipe)

    def _used_params(self) -> ParamLayout:
        """The layout of the planned parameters the lowering reads (traced once in a graph never built)."""
        dummy = self.planner.plan(0, np.zeros(1, np.int64), np.array([[64, 64]]), [np.zeros((0, 4), np.float32)])
        steps = self._host_steps(dummy.steps)
        every = ParamLayout(steps, [(j, name) for j, step in enumerate(steps) for name in sorted(step)])
        said = repr(self.graph_spec)
        shapes = tuple((key, slot.integer, slot.shape) for key, slot in every.slots.items())
        # a spec naming an object by its address (another may reuse it) or eliding an array is traced each time
        memo = (
            None
            if " at 0x" in said or "..." in said
            else (said, self.form, self.source.target, type(self.target), shapes)
        )
        used = _TRACED.get(memo) if memo is not None else None
        if used is None:
            used = self._traced_use(every)
            if memo is not None:
                _TRACED[memo] = used
        return ParamLayout(steps, [key for key in every.keys if key in used])

    def _traced_use(self, every: ParamLayout) -> frozenset:
        """The keys of ``every`` that the lowering reads, found by tracing the graph (never built)."""
        recorded: list = []

        @pipeline_def(enable_conditionals=uses_conditionals(self.graph_spec, self.form))
        def trace():
            inputs = self._external(lambda info: None, every, fed=self.target.feeds)
            params = every.nodes(inputs[: every.outputs])
            recorded.append(params)
            state = self.target.start(inputs[every.outputs :], gpu=False)
            g = Graph(
                self.graph_spec,
                params,
                gpu=False,
                decoder={},
                target=self.target,
                state=state,
                form=self.form,
            )
            g.encoded = fn.external_source(name="encoded")
            return tuple(lower(g))

        with quiet_auto_aug(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The external source node")  # the trace feeds every parameter
            trace(batch_size=1, num_threads=1, device_id=None)
        return frozenset(recorded[0].used)

    def _host_steps(self, steps: Sequence[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """The plan's steps, with the per-sample parameters the policies' ``"gpu"`` form reads worked out from
        their draws (``augment_fused.host_params``; nothing added in the ``"cpu"`` form)."""
        out = list(steps)
        if self.form != "gpu":
            return out
        for j, op in enumerate(self.graph_spec.ops):
            if isinstance(op, POLICIES):
                size = self.graph_spec.size_before(j)
                assert size is not None  # the policies need images of one size (refused in build_spec)
                out[j] = {**out[j], **host_params(op, out[j], size)}
        return out

    def _external(self, source: Callable, layout: ParamLayout | None = None, fed: int | None = None):
        """One ``external_source`` giving the packed parameters of ``layout`` (the run's by default),
        then ``fed`` target inputs (by default what the run feeds)."""
        layout = layout or self.layout
        outputs = layout.outputs + (self.fed if fed is None else fed)
        if outputs == 0:
            return []
        nodes = fn.external_source(source=source, batch=True, batch_info=True, num_outputs=outputs)
        return list(nodes) if isinstance(nodes, (list, tuple)) else [nodes]

    def _lower(self, encoded, inputs: list, targets: list, hw_decoder_load: float | None = None) -> list:
        """The lowered graph on ``encoded`` images with the parameter ``inputs`` and the target's
        ``targets`` inputs; on the GPU with ``hw_decoder_load``, else the share resolved so far
        (``"auto"`` before measuring: DALI's default)."""
        n = self.layout.outputs
        if hw_decoder_load is None:
            hw_decoder_load = DEFAULT_LOAD if self.hw_decoder_load is None else self.hw_decoder_load
        settings = dataclasses.replace(self.decoder, hw_decoder_load=hw_decoder_load)
        state = self.target.start(targets, gpu=self.gpu)
        g = Graph(
            self.graph_spec,
            self.layout.nodes(inputs[:n]),
            gpu=self.gpu,
            decoder=decoder_kwargs(self.gpu, settings),
            target=self.target,
            state=state,
            form=self.form,
        )
        g.encoded = encoded
        return lower(g)

    def _plan(self, refs: Sequence[BatchRef]) -> list[np.ndarray]:
        """The packed parameters of every sample of ``refs`` (``batch_size`` rows per ref, in order),
        drawn at once (the refs may span epochs); each ref gets its content sizes (``ref.content_sizes``)."""
        bs = refs[0].indices.shape[0]
        indices = np.concatenate([r.indices for r in refs])
        positions = np.concatenate([r.positions for r in refs])
        epochs = np.repeat(np.array([r.epoch for r in refs], np.int64), bs)
        plan = self.planner.plan(
            epochs, positions, self.sizes[indices], self.source.target.planning_boxes(self.source, indices)
        )
        content = self.planner.content_sizes(plan)
        tail = None if self.tail is None else torch.from_numpy(self.tail.pack(plan.steps, len(indices)))
        if tail is not None and self.placement.device.type == "cuda":
            tail = tail.pin_memory()  # here, on the planning thread: the batch's copy is then an async one
        for m, ref in enumerate(refs):
            ref.content_sizes = content[m * bs : (m + 1) * bs]
            if tail is not None:
                ref.tail_params = tail[m * bs : (m + 1) * bs]
        return self.layout.pack(self._host_steps(plan.steps), len(indices))

    def _feed(self, ref: BatchRef) -> list:
        """What the external source gives for the target of batch ``ref``'s samples (nothing when the
        reader reads it, or it does not move with the pixels)."""
        return self.target.feed(self.source, ref.indices) if self.fed else []

    def device_id(self) -> int | None:
        if not self.gpu:
            return None
        index = self.placement.device.index
        return torch.cuda.current_device() if index is None else index

    def _check_order(self, identity, ref: BatchRef, consumed: int, expected) -> None:
        """DALI's reader must have read the planned samples: a mismatch would mean wrong targets."""
        bs = self.config.batch_size
        want = expected(consumed * bs, bs)
        if isinstance(self.source, FileSource):  # every slot: one array comparison
            got: np.ndarray | list[str] = np.asarray(identity.as_array()).ravel()
            if np.array_equal(got, want):
                return
        else:  # every sample's tar, offset and name (targets come from the plan: each slot must be right)
            got = [np.asarray(identity[i]).tobytes().decode("utf-8", "surrogateescape") for i in range(bs)]
            if got == list(want):
                return
        raise RuntimeError(
            f"internal error: DALI read {list(got[:3])}... for batch {ref.key}, the plan says {list(want[:3])}..."
        )
