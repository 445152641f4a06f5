"""Writes synthetic demo data into a folder, on all cores, printing its progress (``python -m gpupipe.demo``, which
an installed gpupipe has too).

    python datasets/make_demo.py OUT [--images 1000 | --per-class 100]  (OUT/<class>/<image>.jpg, as the bench's)
    python datasets/make_demo.py OUT --task segmentation      (OUT/images, OUT/masks: gpupipe.SegmentationFolder)
    python datasets/make_demo.py OUT --task detection         (OUT/images, OUT/annotations.json: gpupipe.CocoDetection)

The images are "dead leaves" scenes over 1/f noise (see gpupipe/demo/photos.py;
classification: sides 300-700 px, about 90 KiB each). Segmentation masks
hold class ids (0 = background) of 21 classes; detection has 5 categories.
Prints the folder's statistics and the example command that trains on it.
Bad arguments: one line, ``error: ...``, exit 2.
"""

import sys

from gpupipe.demo.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
