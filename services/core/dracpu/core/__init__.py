"""Shared core of the dracpu services: cpusets, configuration, logging, errors, gRPC plumbing."""

__version__ = "0.2.0"
