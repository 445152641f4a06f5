"""The DALI backend: ops lowered to a DALI graph on the GPU (``dali``) or CPU (``dali-cpu``).

Modules follow the data flow: ``backend`` (runs of epochs, batches out,
bad samples replaced), ``run`` (one pipeline driven batch by batch),
``graph`` (building a run's pipeline and the probe's), ``readers``,
``params`` (planned parameters packed and fed), ``lowering`` (each op
as DALI operators; ``augment`` the auto-augment policies, with ``augment_suite``
their ops and ``augment_fused`` their GPU form; ``forms`` which form an op gets
on which device; ``table`` what they register in), ``decoder`` and ``calibrate`` (decoder settings),
``recovery`` (finding the sample behind an error) and ``lifetime``
(keeping handed-out GPU buffers alive).
"""

from .backend import RUN_SAMPLES, DaliBackend

__all__ = ["DaliBackend", "RUN_SAMPLES"]
