"""The `dracpu` subcommands the whole distribution declares (group dracpu.commands), as the
wheel's metadata and the development install both have them."""

from __future__ import annotations

COMMANDS = {
    "dev": "dracpu.dev.cli:main",
    "gatherinfo": "dracpu.topology.gatherinfo:main",
    "health": "dracpu.core.healthcheck:main",
    "introspect": "dracpu.core.introspect:main",
    "simulate": "dracpu.allocator.simulate:main",
    "uninstall-check": "dracpu.dra_plugin.uninstall_check:main",
    "validate": "dracpu.allocator.validate:main",
}
