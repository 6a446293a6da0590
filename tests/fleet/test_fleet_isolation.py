"""Node isolation with two real kubelets: one node's driver identity (the token its kubelet
mounted into the driver pod) writes its own node's objects and is refused the other node's,
by the API server itself, keyed on the node name the bound token carries (the chart's
admission policies; for a claim's status the authorizer's granular check may say no first).
Each refusal is quoted as the API server words it; each is paired with the same request for
the caller's own node, which the API server accepts (a server-side dry run), so the refusal is
the node's and not the request's."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet.driver_identity import SLICE_REFUSED, DriverIdentity, identity_of, slice_manifest
from fleet.nodes import GUEST_NODE, GUEST_POD, HOST_POD, Fleet

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(900)]

# A claim's status: the chart's policy, or, where the authorizer's granular check of the
# status (`associated-node:patch` of resourceclaims/driver, which the chart's role grants) is
# asked first, the authorizer.
CLAIM_REFUSALS = (
    "ValidatingAdmissionPolicy 'dra-driver-cpu-resourceclaims' with binding "
    "'dra-driver-cpu-resourceclaims' denied request: the dra.cpu driver may only write the "
    "status of ResourceClaims allocated on the node it runs on",
    'changing status.devices requires resource="resourceclaims/driver", '
    'verb="[arbitrary-node:patch]" permission: resourceclaims.resource.k8s.io "dra.cpu" is '
    'forbidden: User "system:serviceaccount:kube-system:dra-driver-cpu" cannot '
    'arbitrary-node:patch resource "resourceclaims/driver" in API group "resource.k8s.io"',
)


@pytest.fixture(params=["host", "guest"], ids=["host-driver", "guest-driver"])
def pair(
    request: pytest.FixtureRequest, claimed: Fleet, tmp_path: Path
) -> Iterator[tuple[DriverIdentity, str, str]]:
    """(the caller's identity, its node, the other node), both ways round."""
    own, other = claimed.nodes if request.param == "host" else claimed.nodes[::-1]
    yield identity_of(claimed, own, tmp_path), own, other


def refusal(done: subprocess.CompletedProcess[str]) -> str:
    """The API server's words for a refused kubectl call (its stderr), failing on success."""
    assert done.returncode != 0, f"accepted: {done.stdout}"
    return done.stderr.strip()


def test_a_driver_creates_only_its_own_nodes_slices(
    pair: tuple[DriverIdentity, str, str],
) -> None:
    driver, own, other = pair
    mine = driver.kubectl(
        "create",
        "--dry-run=server",
        "-o",
        "name",
        "-f",
        "-",
        stdin=slice_manifest("forged-own", own),
    )
    assert mine.returncode == 0, mine.stderr
    refused = refusal(
        driver.kubectl("create", "-f", "-", stdin=slice_manifest("forged-other", other))
    )
    assert SLICE_REFUSED in refused, refused


def test_a_driver_updates_and_deletes_only_its_own_nodes_slices(
    claimed: Fleet, pair: tuple[DriverIdentity, str, str]
) -> None:
    """An update is a PUT of the slice with one label more (the driver's role has no patch on
    slices), a delete a DELETE: both server-side dry runs, so nothing is written even when
    accepted."""
    driver, own, other = pair
    (mine, *_) = claimed.slices_of(own)
    (theirs, *_) = claimed.slices_of(other)
    for found, allowed in ((mine, True), (theirs, False)):
        name = found["metadata"]["name"]
        changed = json.loads(json.dumps(found))
        changed["metadata"].setdefault("labels", {})["fleet"] = "probe"
        update = driver.kubectl("replace", "--dry-run=server", "-f", "-", stdin=json.dumps(changed))
        delete = driver.kubectl("delete", "--dry-run=server", "resourceslice", name)
        if allowed:
            assert update.returncode == 0 and delete.returncode == 0, (update.stderr, delete.stderr)
            continue
        for done in (update, delete):
            assert SLICE_REFUSED in refusal(done), done.stderr
    # Nothing was written: the other node's slice is as it was.
    after = claimed.host.get("resourceslice", theirs["metadata"]["name"], namespace="")
    assert after["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]


def test_a_driver_writes_the_status_only_of_claims_allocated_on_its_node(
    claimed: Fleet, pair: tuple[DriverIdentity, str, str]
) -> None:
    driver, own, other = pair
    claims = {claimed.host.node: HOST_POD, GUEST_NODE: GUEST_POD}
    for node, allowed in ((own, True), (other, False)):
        claim = claimed.host.get("resourceclaim", claims[node])
        (result, *_) = claim["status"]["allocation"]["devices"]["results"]
        # The allocated device's own entry: a consumable-capacity device's carries its shareID.
        keys = ("driver", "pool", "device", "shareID")
        entry = {key: result[key] for key in keys if key in result}
        code, message = driver.apply_claim_devices(claims[node], [entry])
        if allowed:
            assert code == 200, message
            continue
        assert code == 422, message
        assert any(words in message for words in CLAIM_REFUSALS), message
