"""TLS material, kubeconfig files and in-cluster serviceaccount files for the fake server.

A self-signed CA and a server certificate for 127.0.0.1 (and localhost,
kubernetes.default.svc) are made with `cryptography` when the server starts. Tokens are
opaque random strings the server maps to an identity: the admin user of the kubeconfig, or
a serviceaccount (`system:serviceaccount:NAMESPACE:NAME`).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

IN_CLUSTER_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class Identity:
    """Who a token belongs to. `serviceaccount` is (namespace, name) for a serviceaccount."""

    user: str
    groups: tuple[str, ...] = ()
    serviceaccount: tuple[str, str] | None = None

    @staticmethod
    def of_serviceaccount(namespace: str, name: str) -> Identity:
        return Identity(
            f"system:serviceaccount:{namespace}:{name}",
            (
                "system:serviceaccounts",
                f"system:serviceaccounts:{namespace}",
                "system:authenticated",
            ),
            (namespace, name),
        )


@dataclass(frozen=True)
class Tls:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def server_context(self, directory: Path) -> ssl.SSLContext:
        cert, key = directory / "server.crt", directory / "server.key"
        cert.write_bytes(self.cert_pem + self.ca_pem)
        key.write_bytes(self.key_pem)
        key.chmod(0o600)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        return context


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_tls() -> Tls:
    """A fresh CA and a server certificate it signed, valid for a day around now."""
    start = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    end = start + datetime.timedelta(days=2)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("kube-fake-ca"))
        .issuer_name(_name("kube-fake-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default.svc"),
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("kube-apiserver"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return Tls(
        ca.public_bytes(pem),
        cert.public_bytes(pem),
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


@dataclass(frozen=True)
class KubeContext:
    """One context of a kubeconfig: its name, default namespace and the token of its user
    (`user` names the user entry; by default the context's name)."""

    name: str
    token: str
    namespace: str = "default"
    user: str | None = None
    cluster: str = "kube-fake"


def kubeconfig_text(url: str, ca_pem: bytes, contexts: Sequence[KubeContext], current: str) -> str:
    """A kubeconfig with one cluster (`url`, the CA inline) and the given contexts."""
    clusters = {c.cluster for c in contexts}
    ca = base64.b64encode(ca_pem).decode()
    users: dict[str, str] = {}
    for context in contexts:
        users[context.user or context.name] = context.token
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [
            {"name": name, "cluster": {"server": url, "certificate-authority-data": ca}}
            for name in sorted(clusters)
        ],
        "users": [{"name": name, "user": {"token": token}} for name, token in users.items()],
        "contexts": [
            {
                "name": c.name,
                "context": {
                    "cluster": c.cluster,
                    "user": c.user or c.name,
                    "namespace": c.namespace,
                },
            }
            for c in contexts
        ],
        "current-context": current,
    }
    return yaml.safe_dump(doc, sort_keys=False)


def write_incluster_files(directory: Path, token: str, ca_pem: bytes, namespace: str) -> None:
    """The files Kubernetes mounts at IN_CLUSTER_DIR: token, ca.crt, namespace."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text(token)
    (directory / "ca.crt").write_bytes(ca_pem)
    (directory / "namespace").write_text(namespace)
