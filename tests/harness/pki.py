"""A throwaway certificate authority for TLS tests, made with the openssl command line: a CA,
server certificates for 127.0.0.1 and for a DNS name only, and a client certificate."""

from __future__ import annotations

import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl(folder: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)


@dataclass(frozen=True)
class PKI:
    folder: Path

    def path(self, name: str) -> Path:
        return self.folder / name

    def pem(self, name: str) -> bytes:
        return self.path(name).read_bytes()

    def server_context(self, name: str, *, client_ca: bool = True) -> ssl.SSLContext:
        """Serves certificate `name`; asks for (does not require) a client certificate."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.path(f"{name}.crt"), self.path(f"{name}.key"))
        if client_ca:
            context.load_verify_locations(self.path("ca.crt"))
            context.verify_mode = ssl.CERT_OPTIONAL
        return context


def make_pki(folder: Path) -> PKI:
    folder.mkdir(parents=True, exist_ok=True)
    _openssl(folder, "req", "-x509", *KEY, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=dracpu-test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    leaves = {
        "server-ip": ("/CN=apiserver", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
        "server-named": (
            "/CN=apiserver",
            "subjectAltName=DNS:apiserver.test\nextendedKeyUsage=serverAuth",
        ),
        "client": ("/CN=system:node:node-a/O=system:nodes", "extendedKeyUsage=clientAuth"),
    }
    for name, (subject, extensions) in leaves.items():
        (folder / f"{name}.ext").write_text(extensions + "\n")
        _openssl(folder, "req", *KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", subject)  # fmt: skip
        _openssl(folder, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey",
                 "ca.key", "-CAcreateserial", "-out", f"{name}.crt", "-days", "2",
                 "-extfile", f"{name}.ext")  # fmt: skip
    return PKI(folder)
