"""The package version (also in pyproject.toml), importable without the package's other modules."""
__version__ = "0.1.0"
