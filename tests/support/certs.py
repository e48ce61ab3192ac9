"""A throwaway certificate authority for TLS / mTLS tests (openssl CLI)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


class TestCA:
    """A CA in ``directory`` that issues server and client certificates."""

    __test__ = False  # not a pytest class

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.cert = directory / "ca.pem"
        self.key = directory / "ca.key"
        _openssl(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=uns-test-ca",
            "-keyout",
            str(self.key),
            "-out",
            str(self.cert),
            cwd=directory,
        )

    def issue(self, name: str, common_name: str, *, server: bool) -> Issued:
        key, csr, cert = (self.dir / f"{name}.{ext}" for ext in ("key", "csr", "pem"))
        ext = self.dir / f"{name}.ext"
        ext.write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
            if server
            else "extendedKeyUsage=clientAuth\n"
        )
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={common_name}",
            "-keyout",
            str(key),
            "-out",
            str(csr),
            cwd=self.dir,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            str(csr),
            "-CA",
            str(self.cert),
            "-CAkey",
            str(self.key),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            str(ext),
            "-out",
            str(cert),
            cwd=self.dir,
        )
        return Issued(cert, key)
