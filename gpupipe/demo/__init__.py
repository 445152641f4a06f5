"""Synthetic demo data, generated locally (nothing downloaded): the bench's image folder and the
examples' data.

- ``photos``: "dead leaves" JPEGs in ``root/<class>/<image>.jpg`` (``DemoSpec``, ``ensure_demo``,
  ``generate``, ``folder_stats``), cached in gpupipe's cache folder by the bench.
- ``tasks``: segmentation (images and class-id masks) and detection (images and COCO annotations)
  scenes built from the same leaves (``TaskSpec``, ``write_segmentation``, ``write_detection``).

Not part of the loading library: ``datasets/make_demo.py``, ``python -m gpupipe.bench`` and the
benchmarks use it.
"""
