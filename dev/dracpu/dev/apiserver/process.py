"""The API-server fake as a child process of a test, a benchmark or a script: started on a free
loopback port, waited for until its kubeconfig is written and it answers, stopped with
SIGTERM. (`dracpu dev up` starts its own through its supervisor, `dracpu.dev.services`.)"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx

from dracpu.core.errors import UnavailableError
from dracpu.dev.apiserver.client import ClusterClient, server_of

START_TIMEOUT = 30.0  # seconds: an interpreter start on a loaded machine


class FakeProcess:
    """`python -m dracpu.dev.apiserver` writing `directory/kubeconfig`, logging to
    `directory/apiserver.log`."""

    def __init__(self, directory: Path, *, python: str = sys.executable) -> None:
        self.directory = directory
        self.kubeconfig = directory / "kubeconfig"
        self.log = directory / "apiserver.log"
        self.python = python
        self._proc: subprocess.Popen[bytes] | None = None
        self._client: ClusterClient | None = None

    def start(self, timeout: float = START_TIMEOUT) -> FakeProcess:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.kubeconfig.unlink(missing_ok=True)
        argv = [self.python, "-m", "dracpu.dev.apiserver", "--kubeconfig", str(self.kubeconfig)]
        with self.log.open("ab") as out:
            self._proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self._proc.poll() is not None:
                raise UnavailableError(
                    f"the API-server fake exited ({self._proc.returncode}): "
                    f"{self.log.read_text(errors='replace')[-2000:]}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise UnavailableError(f"the API-server fake did not answer within {timeout} s")
            time.sleep(0.02)
        return self

    def _answers(self) -> bool:
        if not self.kubeconfig.exists():
            return False
        try:
            return httpx.get(server_of(self.kubeconfig) + "/apis/resource.k8s.io").is_success
        except httpx.HTTPError:
            return False

    @property
    def pid(self) -> int:
        assert self._proc is not None, "not started"
        return self._proc.pid

    def client(self) -> ClusterClient:
        """One client for the process's life."""
        if self._client is None:
            self._client = ClusterClient(self.kubeconfig)
        return self._client

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> FakeProcess:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
