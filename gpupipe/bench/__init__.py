"""The bench: ``python -m gpupipe.bench`` (see :mod:`gpupipe.bench.__main__`).

Modules follow the run: ``demo`` makes the data, ``runner`` builds each
backend's loader and the shared training step, ``measure`` times them,
``monitor`` samples CPU / memory / GPU, ``report`` writes table, JSON and chart.
"""
