"""Shared core of the dracpu services: cpusets, configuration, logging, errors, gRPC plumbing."""

from importlib.metadata import PackageNotFoundError, version

# The version is written once, in pyproject.toml; every installed build (the editable checkout,
# a wheel, an image) carries it in its distribution's metadata.
try:
    __version__ = version("dra-driver-cpu")
except PackageNotFoundError:  # a tree imported without being installed
    __version__ = "0+unknown"
