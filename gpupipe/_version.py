"""gpupipe's version (one home: the package, the manifest's ``written_by`` and pyproject.toml read it).

Between releases (the changelog's ``Unreleased``) it is the next release's development version
(``0.3.0.dev0``), so that a wheel built from main is not taken for the release it grew from;
``tests/test_installed_wheel.py`` holds it to the changelog.
"""

__version__ = "0.3.0.dev0"
