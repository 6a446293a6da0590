"""What the dra-plugin's plain imports of the official client load: none of its generated API
classes or models (the client imports those on first use), and nothing the images leave out
(the client's asyncio twin, aiohttp, and the development-only kubernetes-validate)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

# In the images: kubernetes/aio removed, the aiohttp stack uninstalled, no development packages.
ABSENT = ("kubernetes.aio", "aiohttp", "kubernetes_validate")

PROBE = textwrap.dedent(f"""
    import importlib.abc, json, sys

    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if any(name == a or name.startswith(a + ".") for a in {ABSENT!r}):
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Absent())
    import dracpu.dra_plugin.runtime
    import dracpu.dra_plugin.cluster.api_access, dracpu.dra_plugin.cluster.apiserver
    names = [n for n in sys.modules if n == "kubernetes" or n.startswith("kubernetes.")]
    print(json.dumps({{
        "models": [n for n in names if n.startswith("kubernetes.client.models.")],
        "apis": [n for n in names if n.startswith("kubernetes.client.api.")],
        "absent": [n for n in sys.modules if n.startswith({ABSENT!r})],
        "count": len(names),
    }}))
""")


def test_the_plugins_client_imports_load_no_generated_api_or_model() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["models"] == []
    assert seen["apis"] == []
    assert seen["absent"] == []
    # The client's own modules only (36 for release 37): a release that imports its
    # generated classes again would load hundreds.
    assert seen["count"] < 60, seen["count"]
