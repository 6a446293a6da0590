"""The one CDI writer: both specs dracpu writes (a claim's cpuset env, a request's metadata
mount) carry every field their cdiVersion requires and nothing a newer version added."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from dracpu.allocator.store import cdi as claim_specs
from dracpu.core import cdi
from dracpu.core.cpuset import CPUSet
from dracpu.core.errors import InvalidInputError
from dracpu.dra_plugin.common.claim_request import ClaimRef
from dracpu.dra_plugin.kubelet.metadata import MetadataDevice, MetadataWriter

# A UID starting with a digit: the metadata device is named by it.
UID = "0f4e8b8e-3a8a-4c55-9d5f-6e2d1c7a9b10"


def minimum_version(spec: dict[str, Any]) -> tuple[int, int, int]:
    """The oldest cdiVersion that carries `spec`, by the rules of CDI's specs-go
    MinimumRequiredVersion (what each version added)."""
    devices = spec["devices"]
    edits = [d.get("containerEdits", {}) for d in devices] + [spec.get("containerEdits", {})]
    if any(k in e for e in edits for k in ("intelRdt", "additionalGids")):
        return (0, 7, 0)
    class_ = spec["kind"].split("/", 1)[1]
    if "annotations" in spec or any("annotations" in d for d in devices) or "." in class_:
        return (0, 6, 0)
    if any(d["name"][:1].isdigit() for d in devices) or any(
        "hostPath" in n for e in edits for n in e.get("deviceNodes", [])
    ):
        return (0, 5, 0)
    if any("type" in m for e in edits for m in e.get("mounts", [])):
        return (0, 4, 0)
    return (0, 3, 0)


def check_required_fields(spec: dict[str, Any]) -> None:
    """The fields the CDI spec requires, checked independently of the writer."""
    assert re.fullmatch(r"\d+\.\d+\.\d+", spec["cdiVersion"])
    vendor, _, class_ = spec["kind"].partition("/")
    assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]*[A-Za-z0-9]", vendor)
    assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*[A-Za-z0-9]", class_)
    assert spec["devices"], "a spec must list at least one device"
    for device in spec["devices"]:
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]*[A-Za-z0-9]", device["name"])
        edits = device["containerEdits"]
        assert edits, "a device must edit the container"
        for entry in edits.get("env", []):
            assert re.fullmatch(r"[^=]+=.*", entry)
        for mount in edits.get("mounts", []):
            assert mount["hostPath"].startswith("/") and mount["containerPath"].startswith("/")


def written_specs(tmp_path: Path) -> dict[str, dict[str, Any]]:
    claim_path = claim_specs.write_spec(tmp_path / "cdi", UID, CPUSet.parse("2-5"))
    writer = MetadataWriter("dra.cpu", tmp_path / "metadata", tmp_path / "cdi")
    writer.write(
        ClaimRef("default", "claim", UID), None, {"cpus": [MetadataDevice("node", "cpudev000")]}
    )
    metadata_path = writer.cdi_file(UID, "cpus")
    return {
        "claim": json.loads(claim_path.read_text()),
        "metadata": json.loads(metadata_path.read_text()),
    }


def test_both_specs_are_written_at_the_one_version_with_every_required_field(
    tmp_path: Path,
) -> None:
    specs = written_specs(tmp_path)
    for spec in specs.values():
        check_required_fields(spec)
        assert spec["cdiVersion"] == cdi.CDI_VERSION
        declared = tuple(int(part) for part in spec["cdiVersion"].split("."))
        assert minimum_version(spec) <= declared
    # The version is the oldest that carries both: the metadata device starts with a digit.
    assert max(minimum_version(s) for s in specs.values()) == (0, 5, 0)
    assert cdi.CDI_VERSION == "0.5.0"


def test_the_claim_spec_injects_the_cpuset_and_the_metadata_spec_mounts_the_file(
    tmp_path: Path,
) -> None:
    specs = written_specs(tmp_path)
    assert specs["claim"]["kind"] == "dra.k8s.io/cpu"
    assert specs["claim"]["devices"] == [
        {"name": f"claim-{UID}", "containerEdits": {"env": [f"DRA_CPUSET_{UID}=2-5"]}}
    ]
    (device,) = specs["metadata"]["devices"]
    assert specs["metadata"]["kind"] == "dra.cpu/metadata"
    assert device["name"] == f"{UID}_cpus"
    (mount,) = device["containerEdits"]["mounts"]
    assert Path(mount["hostPath"]).read_text().startswith('{"kind":"DeviceMetadata"')
    assert mount["options"] == ["ro", "bind"]


def test_a_spec_is_written_durably_under_a_temp_name_no_runtime_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    renamed: list[tuple[str, str]] = []
    real_replace = __import__("os").replace

    def replace(src: str, dst: str) -> None:
        renamed.append((Path(src).name, Path(dst).name))
        real_replace(src, dst)

    monkeypatch.setattr("os.replace", replace)
    path = tmp_path / "vendor.example-x_dev.json"
    cdi.write_spec(path, "vendor.example/x", [cdi.Device("dev", env=("A=1",))])
    ((temp, final),) = renamed
    assert final == path.name and temp.endswith(".tmp") and not temp.endswith(".json")


@pytest.mark.parametrize(
    ("kind", "device", "why"),
    [
        pytest.param(
            "vendor.example/x.y", cdi.Device("d", env=("A=1",)), "kind", id="dotted-class"
        ),
        pytest.param("noslash", cdi.Device("d", env=("A=1",)), "kind", id="no-vendor"),
        pytest.param("vendor.example/x", cdi.Device("d/e", env=("A=1",)), "name", id="bad-name"),
        pytest.param("vendor.example/x", cdi.Device("d"), "edits nothing", id="no-edits"),
        pytest.param("vendor.example/x", cdi.Device("d", env=("A",)), "K=V", id="env-no-value"),
        pytest.param(
            "vendor.example/x",
            cdi.Device("d", mounts=(cdi.Mount("relative", "/in"),)),
            "mount",
            id="relative-mount",
        ),
    ],
)
def test_a_spec_its_version_cannot_carry_is_refused(
    kind: str, device: cdi.Device, why: str
) -> None:
    with pytest.raises(InvalidInputError, match=why):
        cdi.spec_document(kind, [device])


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("annotations", {"a": "b"}, id="spec-annotations"),
        pytest.param("intelRdt", {"closID": "x"}, id="intel-rdt"),
    ],
)
def test_fields_of_later_versions_are_refused(field: str, value: object) -> None:
    document = cdi.spec_document("vendor.example/x", [cdi.Device("d", env=("A=1",))])
    if field == "annotations":
        document[field] = value
    else:
        document["devices"][0]["containerEdits"][field] = value
    with pytest.raises(InvalidInputError):
        cdi.check_spec(document)
