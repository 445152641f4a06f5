"""Samples CPU use and memory of this process and its workers, the rest of the machine, and the GPU.

GPU figures come from NVML for the device torch uses, found by its UUID (or
PCI bus id): torch's device index is renumbered by ``CUDA_VISIBLE_DEVICES``
and need not be NVML's. "GPU util" is NVML's utilisation: the share of each
sampling period (1/6 s to 1 s, set by the driver) in which at least one
kernel was running on the GPU. It does not say how much of the GPU those
kernels used; 100 % with tiny kernels is possible.
"""

from __future__ import annotations

import logging
import os
import statistics
import threading

logger = logging.getLogger(__name__)


class ResourceMonitor:
    """A background thread sampling every ``interval`` seconds while in a ``with`` block.

    It may be entered again: samples of all blocks add up.

    Reports mean CPU (% of one core, summed over the process tree), peak
    resident memory of the tree, and, where NVML works, mean GPU utilisation
    and peak GPU memory.
    """

    def __init__(self, interval: float = 0.2, gpu_index: int | None = None) -> None:
        import psutil

        self._psutil = psutil
        self.interval = interval
        self._root = psutil.Process(os.getpid())
        self._procs: dict[int, psutil.Process] = {}
        self._cpu: list[float] = []
        self._rss: list[float] = []
        self._gpu_util: list[float] = []
        self._gpu_mem: list[float] = []
        self._others: list[float] = []  # CPU % (of one core) used by processes outside the tree
        self._cores = psutil.cpu_count() or 1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml_handle = _nvml_handle(gpu_index) if gpu_index is not None else None

    def __enter__(self) -> ResourceMonitor:
        self._psutil.cpu_percent(None)  # primes the system-wide counter
        self._sample(record=False)  # primes per-process CPU counters
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpupipe-monitor", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample(record=True)  # short phases get at least one sample

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample(record=True)

    def _sample(self, record: bool) -> None:
        psutil = self._psutil
        try:
            tree = [self._root] + self._root.children(recursive=True)
        except psutil.Error:
            return
        cpu = rss = 0.0
        for proc in tree:
            cached = self._procs.setdefault(proc.pid, proc)
            try:
                cpu += cached.cpu_percent(None)
                rss += cached.memory_info().rss
            except psutil.Error:  # a worker that just exited
                continue
        if record:
            self._cpu.append(cpu)
            self._rss.append(rss / 2**20)
            self._others.append(max(0.0, psutil.cpu_percent(None) * self._cores - cpu))
            if self._nvml_handle is not None:
                import pynvml

                try:
                    self._gpu_util.append(float(pynvml.nvmlDeviceGetUtilizationRates(self._nvml_handle).gpu))
                    self._gpu_mem.append(pynvml.nvmlDeviceGetMemoryInfo(self._nvml_handle).used / 2**20)
                except pynvml.NVMLError as err:
                    logger.warning("NVML sampling failed, GPU figures stop here: %s", err)
                    self._nvml_handle = None

    def summary(self) -> dict[str, float | None]:
        """Mean CPU %, peak RSS MiB, mean GPU util % and peak GPU memory MiB (None when not sampled)."""

        def mean(values):
            return round(statistics.fmean(values), 1) if values else None

        def peak(values):
            return round(max(values), 1) if values else None

        return {
            "cpu_percent": mean(self._cpu),
            "peak_rss_mib": peak(self._rss),
            "other_processes_cpu_percent": mean(self._others),
            "gpu_util_percent": mean(self._gpu_util),
            "peak_gpu_mem_mib": peak(self._gpu_mem),
        }


def _nvml_handle(index: int):
    """NVML's handle of torch's CUDA device ``index``: by UUID, else PCI bus id, else (last) by index."""
    try:
        import pynvml
    except ImportError as err:
        logger.warning("no GPU sampling (pip install nvidia-ml-py): %s", err)
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        logger.warning("no GPU sampling, NVML failed: %s", err)
        return None
    import torch

    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    lookups = []
    if uuid is not None:
        lookups.append(lambda: pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}"))
    if hasattr(props, "pci_bus_id"):
        domain, device = getattr(props, "pci_domain_id", 0), getattr(props, "pci_device_id", 0)
        bus = f"{domain:08x}:{props.pci_bus_id:02x}:{device:02x}.0"
        lookups.append(lambda: pynvml.nvmlDeviceGetHandleByPciBusId(bus))
    for lookup in lookups:
        try:
            return lookup()
        except pynvml.NVMLError:
            continue
    logger.warning(
        "NVML could not find torch's device %d by UUID or PCI bus id; sampling NVML's device %d", index, index
    )
    try:
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    except pynvml.NVMLError as err:
        logger.warning("no GPU sampling, NVML failed: %s", err)
        return None
