"""The CPU map in a real browser: headless Chromium, driven over the DevTools protocol, loads
/ui from the real pod (`dracpu dev up` on the xeon-2s-ht fixture) with three claims prepared.

The screenshot is kept as tests/artifacts/api-cpu-map.png. Chromium comes from Debian's
`chromium` package (tools/install-chromium.sh); without it the test skips and says why.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness.api_stack import Stack
from harness.services import wait_serving
from harness.waits import wait_for

from dracpu.core.cpuset import CPUSet

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
DEADLINE = 30.0

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="no /usr/bin/chromium: run tools/install-chromium.sh (Debian package 'chromium')",
)


class DevTools:
    """A minimal Chrome DevTools Protocol client over one page's websocket."""

    def __init__(self, websocket_url: str) -> None:
        import websocket  # websocket-client, installed with the kubernetes client

        self._ws = websocket.create_connection(
            websocket_url, timeout=DEADLINE, suppress_origin=True
        )
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        request_id = self._next_id
        self._ws.send(json.dumps({"id": request_id, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv())
            if message.get("id") == request_id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))
            self.events.append(message)

    def wait_for(self, method: str) -> dict[str, Any]:
        """The first `method` event, among those seen or the next ones the page sends."""
        for event in self.events:
            if event.get("method") == method:
                return event

        def received() -> dict[str, Any] | None:
            message: dict[str, Any] = json.loads(self._ws.recv())
            self.events.append(message)
            return message if message.get("method") == method else None

        return wait_for(received, f"the DevTools event {method}", timeout=DEADLINE, interval=0)

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def errors(self) -> list[str]:
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(json.dumps(params.get("exceptionDetails", {}))[:300])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(json.dumps(params.get("args", []))[:300])
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                found.append(params["entry"].get("text", ""))
        return found

    def close(self) -> None:
        self._ws.close()


@pytest.fixture
def browser() -> Iterator[str]:
    """Headless Chromium with a DevTools port; yields its HTTP endpoint."""
    profile = Path(tempfile.mkdtemp(prefix="api-chromium-", dir="/tmp"))
    process = subprocess.Popen(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",
            "--window-size=1500,1000",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        asyncio.run(
            wait_serving(
                port_file,
                process,
                what="chromium",
                timeout=DEADLINE,
                status="DevTools port",
                probe=lambda: port_file.exists() and port_file.read_text().strip(),
            )
        )
        yield f"http://127.0.0.1:{port_file.read_text().split()[0]}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(profile, ignore_errors=True)


def _page(endpoint: str) -> DevTools:
    targets = httpx.get(f"{endpoint}/json/list", timeout=10).json()
    page = next(t for t in targets if t.get("type") == "page")
    tools = DevTools(page["webSocketDebuggerUrl"])
    for domain in ("Page", "Runtime", "Log"):
        tools.send(f"{domain}.enable")
    return tools


def _load(tools: DevTools, url: str) -> None:
    tools.events.clear()
    tools.send("Page.navigate", url=url)
    tools.wait_for("Page.loadEventFired")


PAGE_FACTS = """(() => {
  const q = (s) => document.querySelectorAll(s);
  const threads = [...q('#cpu-map g.thread')];
  return {
    sockets: q('#cpu-map g.socket').length,
    numa: q('#cpu-map g.numa').length,
    l3: q('#cpu-map g.l3').length,
    cores: q('#cpu-map g.core').length,
    threads: threads.length,
    cpus: threads.map((t) => Number(t.dataset.cpu)).sort((a, b) => a - b),
    titled: threads.filter((t) => t.querySelector(':scope > title')).length,
    roles: threads.reduce((acc, t) => {
      const key = t.dataset.claim || t.dataset.role;
      acc[key] = (acc[key] || 0) + 1;
      return acc;
    }, {}),
    legendClaims: [...q('#legend li[data-claim]')].map((li) => li.dataset.claim).sort(),
    legendRoles: [...q('#legend li[data-role]')].map((li) => li.dataset.role),
    svgWidth: document.querySelector('#cpu-map').getBoundingClientRect().width,
    cpu21Title: document.querySelector('g.thread[data-cpu="21"] > title').textContent,
  };
})()"""


def test_cpu_map_renders_in_chromium(browser: str, stack: Stack) -> None:
    tools = _page(browser)
    try:
        _load(tools, f"{stack.url}/")
        assert tools.evaluate("document.querySelector('a#cpu-map-link').getAttribute('href')") == (
            "/ui"
        )
        _load(tools, f"{stack.url}/ui")
        facts = tools.evaluate(PAGE_FACTS)
        metrics = tools.send("Page.getLayoutMetrics")["cssContentSize"]
        shot = tools.send(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={
                "x": 0,
                "y": 0,
                "width": metrics["width"],
                "height": metrics["height"],
                "scale": 1,
            },
        )
        errors = tools.errors()
    finally:
        tools.close()

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    png = base64.b64decode(shot["data"])
    (ARTIFACTS / "api-cpu-map.png").write_bytes(png)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")

    assert errors == []
    assert (facts["sockets"], facts["numa"], facts["l3"], facts["cores"]) == (2, 2, 2, 20)
    assert facts["cpus"] == list(range(40))
    assert facts["titled"] == 40
    claims = stack.claims
    claimed = sum(len(CPUSet.parse(c["cpus"])) for c in claims.values())
    assert facts["roles"] == {
        "shared": 40 - claimed,
        **{c["uid"]: len(CPUSet.parse(c["cpus"])) for c in claims.values()},
    }
    assert facts["legendClaims"] == sorted(c["uid"] for c in claims.values())
    assert facts["legendRoles"] == ["reserved", "shared"]
    assert facts["svgWidth"] > 0
    # CPU 21 is core 1's second thread, in the db claim (1-2,21-22: CPU 0 is the shared-pool
    # floor).
    assert CPUSet.parse("21").issubset(CPUSet.parse(claims["db"]["cpus"]))
    assert facts["cpu21Title"].startswith("CPU 21 — socket 0, NUMA node 0, ")
    assert facts["cpu21Title"].endswith(f"claim team-a/db (uid {claims['db']['uid']})")
