"""gpupipe's version (one home: the package, the manifest's ``written_by`` and pyproject.toml read it)."""

__version__ = "0.2.0"
