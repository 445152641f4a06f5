"""The loader's front end: what ``gpupipe.loader()`` builds and what a training loop iterates.

Following the data flow: ``config`` (``LoaderConfig``, every setting checked once), ``steps`` (the steps
``loader()`` takes: device and backend, the output, the scan for bad files, the batch check),
``factory`` (``loader()`` itself), ``sampling`` (each rank's share of an epoch), ``agreement`` (ranks
compare their listing and settings), ``epochs`` (the epoch cursor, ``state_dict`` and resume),
``loader`` (``Loader``: the iterator over a backend's batches), ``mixing`` (MixUp/CutMix on a batch),
``transfer`` (device transfer and the ``Output`` conversion), ``stats`` (per-epoch statistics) and
``frameworks`` (Lightning and Accelerate). The documented names stay ``gpupipe.loader``,
``gpupipe.Loader``, ``gpupipe.LoaderConfig``, ...; this package imports nothing on its own, so a backend
can import ``loading.config`` without importing the loader.
"""
