"""The bench: ``python -m gpupipe.bench`` (see ``gpupipe.bench.__main__``).

Modules follow the run: ``args`` reads the flags, ``demo`` makes the data (``demo_tasks``: segmentation
and detection sets), ``estimate`` says how long the run will take, ``runner``
builds each backend's loader (``baseline``: the tutorial DataLoader) and the
shared training step, ``measure`` times them, ``monitor`` samples CPU /
memory / GPU, ``report`` writes table, JSON and chart. The precision is
``gpupipe.amp``'s choice.
"""
