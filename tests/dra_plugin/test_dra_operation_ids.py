"""One kubelet call followed through the services' logs by its operation ID.

Real processes (topology on a sysfs fixture, the allocator, the dra-plugin) on temporary unix
sockets, their logs in klog's text format (`harness.dra_plugin_node`); the kubelet stand-in
sends no ID, as the kubelet does not. The dra-plugin gives each call one, and the allocator's
lines for that call's claims carry the same `opID`.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import pytest
from harness.dra_plugin_node import Node, claim, result
from logformats import KlogLine, klog_lines

from dracpu.dev.kubelet_sim import Claim, KubeletSim

pytestmark = pytest.mark.timeout(120)

OP_ID = re.compile(r"[0-9a-f]{12}")


def lines(node: Node, service: str) -> list[KlogLine]:
    return klog_lines(node.log(service).read_text())


def said(node: Node, service: str, message: str, **fields: Any) -> list[KlogLine]:
    """The lines of `service` with that message and those fields."""
    return [
        line
        for line in lines(node, service)
        if line.msg == message and all(line.values.get(k) == v for k, v in fields.items())
    ]


def op_id(line: KlogLine) -> str:
    value = line.values.get("opID")
    assert isinstance(value, str) and OP_ID.fullmatch(value), line
    return value


async def test_one_prepare_and_its_unprepare_can_be_followed_into_the_allocator(
    started: Node,
) -> None:
    plugin = await KubeletSim(started.kubelet_root).register("dra.cpu", timeout=15)
    uid = str(uuid.uuid4())
    started.write_claim(claim("one", uid, [result("cpudevnuma000", cpus=4)]))
    answer = await plugin.prepare([Claim("default", "one", uid)])
    assert answer[uid].error == ""
    unprepared = await plugin.unprepare([Claim("default", "one", uid)])
    assert unprepared == {uid: ""}
    await plugin.close()

    (plugin_prepared,) = said(started, "plugin", "claim prepared", uid=uid)
    (allocator_prepared,) = said(started, "allocator", "claim prepared", claim=uid)
    prepare_op = op_id(plugin_prepared)
    assert op_id(allocator_prepared) == prepare_op
    # Every line the call wrote in the dra-plugin carries it, from the call's first line.
    assert said(started, "plugin", "preparing claims", opID=prepare_op)

    (plugin_unprepared,) = said(started, "plugin", "claim unprepared", uid=uid)
    (allocator_unprepared,) = said(started, "allocator", "claim unprepared", claim=uid)
    unprepare_op = op_id(plugin_unprepared)
    assert op_id(allocator_unprepared) == unprepare_op != prepare_op

    # Lines of no call (start-up, the publisher's polls) carry none.
    assert any("opID" not in line.values for line in lines(started, "allocator"))


async def test_concurrent_kubelet_calls_keep_their_own_ids_in_the_allocators_batches(
    started: Node,
) -> None:
    plugin = await KubeletSim(started.kubelet_root).register("dra.cpu", timeout=15)
    uids = [str(uuid.uuid4()) for _ in range(6)]
    for index, uid in enumerate(uids):
        started.write_claim(claim(f"c{index}", uid, [result(f"cpudevnuma00{index % 2}", cpus=2)]))
    # One call per claim, all at once: the allocator takes those that arrive together in one
    # batch, started by one of them.
    answers = await asyncio.gather(
        *(plugin.prepare([Claim("default", f"c{i}", uid)]) for i, uid in enumerate(uids))
    )
    await plugin.close()
    assert [a[uid].error for a, uid in zip(answers, uids, strict=True)] == [""] * len(uids)

    ops = {}
    for uid in uids:
        (plugin_line,) = said(started, "plugin", "claim prepared", uid=uid)
        (allocator_line,) = said(started, "allocator", "claim prepared", claim=uid)
        ops[uid] = op_id(plugin_line)
        assert op_id(allocator_line) == ops[uid], uid
    assert len(set(ops.values())) == len(uids)
