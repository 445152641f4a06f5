"""Whether gpupipe opens a torchvision folder dataset's files as its ``loader`` opens them.

gpupipe decodes the files itself, as torchvision's ``pil_loader`` opens them (``Image.open(f).convert("RGB")``).
``default_loader`` is that loader, unless torchvision's image backend is ``"accimage"``
(``torchvision.set_image_backend``): it then opens files with accimage (another JPEG decode, and
accimage images that torchvision's transforms resize and crop with accimage's own kernels), or fails
at every file where accimage is not installed.
"""

from __future__ import annotations

from typing import Any

_FALLBACK = (
    "pass fallback='torchvision' to read the dataset as it is, with your loader (dataset[i] in DataLoader "
    "workers, on the CPU)"
)


def loader_problem(folder: Any) -> str | None:
    """Why gpupipe cannot read ``folder``'s files as its ``loader`` reads them, else ``None``.

    Args:
        folder: a torchvision ``ImageFolder`` / ``DatasetFolder``.

    Returns:
        The refusal's text after ``Name(loader=...): ``, naming the loader (or the image backend).
    """
    import torchvision
    from torchvision.datasets.folder import default_loader, pil_loader

    if folder.loader is default_loader and torchvision.get_image_backend() == "accimage":
        return (
            "torchvision's image backend is 'accimage' (torchvision.set_image_backend), so default_loader opens "
            "the files with accimage, whose decode and resizes are not PIL's (and which fails at every file "
            "where accimage is not installed); gpupipe decodes as the PIL loader: set the backend back to 'PIL' "
            f"(torchvision.set_image_backend('PIL')) before building the loader, or {_FALLBACK}"
        )
    if folder.loader in (default_loader, pil_loader):
        return None
    return (
        "gpupipe decodes the files itself, as torchvision's default (PIL) loader opens them, and would not run "
        "yours: leave loader= out to have gpupipe decode them (your transform then receives what the PIL loader "
        f"gives), or {_FALLBACK}"
    )
