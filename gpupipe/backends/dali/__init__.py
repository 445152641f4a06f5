"""The DALI backend: ops lowered to a DALI graph on the GPU (``dali``) or CPU (``dali-cpu``).

Modules follow the data flow: :mod:`.backend` (runs of epochs, batches out,
bad samples replaced), :mod:`.run` (one pipeline driven batch by batch),
:mod:`.graph` (building a run's pipeline and the probe's), :mod:`.readers`,
:mod:`.params` (planned parameters packed and fed), :mod:`.lowering` (each op
as DALI operators), :mod:`.decoder` and :mod:`.calibrate` (decoder settings),
:mod:`.recovery` (finding the sample behind an error) and :mod:`.lifetime`
(keeping handed-out GPU buffers alive).
"""

from .backend import RUN_SAMPLES, DaliBackend

__all__ = ["DaliBackend", "RUN_SAMPLES"]
