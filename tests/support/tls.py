"""A test's own certificate authority, and web configuration files that use it.

``cryptography`` (a test dependency) makes a CA, a server certificate for
127.0.0.1/localhost and a client certificate, each key written with mode 600 as
a real deployment keeps it. Passwords are hashed with bcrypt at its lowest cost,
so a test's scrapes stay cheap; the server checks them the same way at any cost.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bcrypt
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

USER = "prometheus"
PASSWORD = "scrape-Ü-secret"


@dataclass(frozen=True)
class Pki:
    """The files of a test's CA, its server certificate and a client certificate."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def client_context(self, *, with_cert: bool = True) -> ssl.SSLContext:
        """A client that trusts the test CA (and presents the client certificate)."""
        context = ssl.create_default_context(cafile=str(self.ca))
        if with_cert:
            context.load_cert_chain(self.client_cert, self.client_key)
        return context


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.touch(mode=0o600)
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


def _issue(builder: x509.CertificateBuilder, key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (builder.serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))


def make_pki(folder: Path) -> Pki:
    """A fresh CA in ``folder``, with a server and a client certificate it signed."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue(x509.CertificateBuilder().subject_name(_name("aitop test CA"))
                .issuer_name(_name("aitop test CA")).public_key(ca_key.public_key())
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=True,
                    crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                               critical=False),
                ca_key)
    paths = Pki(folder / "ca.pem", folder / "server.pem", folder / "server-key.pem",
                folder / "client.pem", folder / "client-key.pem")
    paths.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    leaves = (
        ("aitop", paths.server_cert, paths.server_key, ExtendedKeyUsageOID.SERVER_AUTH,
         [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
        ("prometheus", paths.client_cert, paths.client_key, ExtendedKeyUsageOID.CLIENT_AUTH,
         [x509.DNSName("prometheus")]),
    )
    for common_name, cert_path, key_path, usage, names in leaves:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue(x509.CertificateBuilder().subject_name(_name(common_name))
                      .issuer_name(ca.subject).public_key(key.public_key())
                      .add_extension(x509.SubjectAlternativeName(names), critical=False)
                      .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                      .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                          ca_key.public_key()), critical=False),
                      ca_key)
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key_path, key)
    return paths


def password_hash(password: str = PASSWORD) -> str:
    """bcrypt at its lowest cost (4): what ``htpasswd -nB`` writes, only cheaper to check."""
    return bcrypt.hashpw(password.encode("utf-8"), bcrypt.gensalt(4)).decode("ascii")


def write_web_config(path: Path, pki: Pki | None, *, client_auth: str | None = None,
                     users: dict[str, str] | None = None, **tls: Any) -> Path:
    """A web configuration file: TLS with ``pki``'s server certificate (paths relative
    to the file, as configuration management writes them), ``client_auth`` with the
    test CA (but with NoClientCert, which takes none), and ``users`` (name -> password,
    hashed here)."""
    config: dict[str, Any] = {}
    if pki is not None:
        section: dict[str, Any] = {
            "cert_file": os.path.relpath(pki.server_cert, path.parent),
            "key_file": os.path.relpath(pki.server_key, path.parent),
            **tls,
        }
        if client_auth is not None:
            section["client_auth_type"] = client_auth
        if client_auth not in (None, "NoClientCert"):
            section["client_ca_file"] = str(pki.ca)
        config["tls_server_config"] = section
    if users:
        config["basic_auth_users"] = {user: password_hash(pw) for user, pw in users.items()}
    path.write_text(yaml.safe_dump(config, allow_unicode=True))
    return path
