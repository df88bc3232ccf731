"""The package's version: ftrain's (include/ftrain/version.h, FTRAIN_VERSION).

pyproject.toml reads it from here; tests/python/packaging.sh fails when it
and the header differ, so the two cannot drift apart.
"""
__version__ = "0.1.0"
