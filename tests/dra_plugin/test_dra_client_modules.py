"""The dra-plugin's service process loads only the parts of the official client it uses, and
every other name of the client still resolves on first use."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def run(code: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_lean_load_imports_no_generated_api_or_model() -> None:
    seen = run("""
        import json, sys
        from dracpu.dra_plugin.cluster import client_modules
        loaded = client_modules.load()
        import dracpu.dra_plugin.cluster.api_access, dracpu.dra_plugin.cluster.apiserver
        names = [n for n in sys.modules if n.startswith("kubernetes")]
        print(json.dumps({
            "loaded": loaded,
            "models": [n for n in names if n.startswith("kubernetes.client.models.")],
            "apis": [n for n in names if n.startswith("kubernetes.client.api.")],
            "kubeconfig": "kubernetes.config.kube_config" in names,
            "dynamic": "kubernetes.dynamic" in names,
        }))
    """)
    assert seen == {"loaded": True, "models": [], "apis": [], "kubeconfig": False,
                    "dynamic": False}  # fmt: skip


def test_every_other_name_of_the_client_resolves_on_first_use() -> None:
    seen = run("""
        import json
        from dracpu.dra_plugin.cluster import client_modules
        client_modules.load()
        import kubernetes
        from kubernetes import client, config
        from kubernetes.client.models import V1ObjectMeta
        print(json.dumps({
            "version": kubernetes.__version__,
            "node": client.models.V1Node.__name__,
            "meta": V1ObjectMeta.__module__,
            "core": client.CoreV1Api.__name__,
            "api_client": client.ApiClient.__module__,
            "load_kube_config": callable(config.load_kube_config),
            "dynamic": kubernetes.dynamic.__name__,
        }))
    """)
    assert seen["version"] == "37.0.2"
    assert seen["node"] == "V1Node"
    assert seen["meta"] == "kubernetes.client.models.v1_object_meta"
    assert seen["core"] == "CoreV1Api"
    assert seen["api_client"] == "kubernetes.client.api_client"
    assert seen["load_kube_config"] is True
    assert seen["dynamic"] == "kubernetes.dynamic"


def test_a_client_imported_already_is_left_as_it_is() -> None:
    seen = run("""
        import json
        import kubernetes
        from dracpu.dra_plugin.cluster import client_modules
        print(json.dumps({"loaded": client_modules.load(),
                          "whole": hasattr(kubernetes.client, "CoreV1Api")}))
    """)
    assert seen == {"loaded": False, "whole": True}
