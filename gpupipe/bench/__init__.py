"""The bench: ``python -m gpupipe.bench`` (see ``gpupipe.bench.__main__``).

Modules follow the run: ``args`` reads the flags, ``gpupipe.demo`` makes the data (outside the bench:
``datasets/make_demo.py`` uses it too), ``estimate`` says how long the run will take, ``runner``
builds each backend's loader (``baseline``: the tutorial DataLoader) and the
shared training step, ``measure`` times them, ``monitor`` samples CPU /
memory / GPU, ``report`` writes table, JSON and chart. The precision is
``gpupipe.amp``'s choice.
"""
