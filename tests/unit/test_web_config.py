"""``--web-config``: the exporter toolkit's file read whole, and what the server makes of it.

The reader reports every problem at once, each at its ``file:line`` and saying
what to do, never quoting a password hash; the TLS context names the file at
fault in one line; basic auth lets in exactly the configured user and password.
"""

from __future__ import annotations

import base64
import ssl
from pathlib import Path

import bcrypt
import pytest
from aitop.engine.prometheus.web import BasicAuth, ServeError, tls_context
from aitop.engine.prometheus.webconfig import (
    CLIENT_AUTH,
    TlsConfig,
    WebConfigError,
    read_web_config,
)
from cryptography.hazmat.primitives import serialization
from support.tls import PASSWORD, USER, make_pki, password_hash, write_web_config


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return make_pki(tmp_path_factory.mktemp("pki"))


def problems(path: Path) -> list[str]:
    with pytest.raises(WebConfigError) as caught:
        read_web_config(path)
    return str(caught.value).splitlines()


def test_a_full_file_reads_with_paths_relative_to_its_folder(pki, tmp_path: Path) -> None:
    config = write_web_config(pki.ca.parent / "web.yml", pki,
                              client_auth="RequireAndVerifyClientCert",
                              users={USER: PASSWORD, "grafana": "other"}, min_version="TLS13")
    with config.open("a") as f:
        f.write("http_server_config:\n  http2: true\n  headers:\n"
                "    X-Frame-Options: deny\n    Strict-Transport-Security: max-age=300\n")
    web = read_web_config(config)
    assert web.tls == TlsConfig(pki.server_cert, pki.server_key, "RequireAndVerifyClientCert",
                                pki.ca, ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_3)
    assert sorted(user for user, _ in web.users) == ["grafana", USER]
    assert bcrypt.checkpw(PASSWORD.encode(), dict(web.users)[USER])
    assert web.headers == (("X-Frame-Options", "deny"),
                           ("Strict-Transport-Security", "max-age=300"))
    assert web.notes == ()  # an exact mapping: nothing to say at start
    assert web.tls is not None and web.tls.client_auth.mode == ssl.CERT_REQUIRED


def test_every_problem_is_reported_at_its_line_saying_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    path.write_text(
        "tls_server_config:\n"                              # 1
        "  cert_file: missing.pem\n"                        # 2
        "  client_auth_type: RequireAnyClientCert\n"        # 3
        "  min_version: TLS10\n"                            # 4
        "  max_version: TLS12\n"                            # 5
        "  cipher_suites: [TLS_AES_128_GCM_SHA256]\n"       # 6
        "  keyfile: key.pem\n"                              # 7
        "basic_auth_users:\n"                               # 8
        "  alice: hunter2-not-a-hash\n"                     # 9
        f"  'bo:b': {password_hash()}\n"                    # 10
        "http_server_config:\n"                             # 11
        "  http2: maybe\n"                                  # 12
        "  headers:\n"                                      # 13
        "    X-Powered-By: aitop\n"                         # 14
        "tls_confg: {}\n"                                   # 15
        "rate_limit: {burst: 1}\n"                          # 16
    )
    found = problems(path)
    print("\n".join(found))
    name = str(path)
    expected = [
        (2, "tls_server_config.cert_file: cannot read"),
        (3, "tls_server_config.client_auth_type: RequireAnyClientCert needs client_ca_file"),
        (4, "tls_server_config.min_version: 'TLS10' is not one of TLS12, TLS13: aitop serves "
            "TLS 1.2 or newer"),
        (6, "tls_server_config.cipher_suites: Go's cipher-suite names"),
        (7, "tls_server_config.keyfile: unknown key: did you mean key_file?"),
        (1, "tls_server_config.key_file: missing: TLS needs cert_file and key_file"),
        (9, "basic_auth_users.alice: is not a bcrypt hash"),
        (10, "basic_auth_users.bo:b: a user name cannot be empty or contain ':'"),
        (12, "http_server_config.http2: must be true or false, not text"),
        (14, "http_server_config.headers.X-Powered-By: cannot be set"),
        (15, "tls_confg: unknown key: did you mean tls_server_config?"),
        (16, "rate_limit: aitop has no rate limiter"),
    ]
    for line, text in expected:
        assert any(p.startswith(f"{name}:{line}: {text}") for p in found), (line, text, found)
    assert len(found) == len(expected), found
    lines = [int(p.split(":")[1]) for p in found]
    assert lines == sorted(lines), "in file order"
    assert not any("hunter2" in p for p in found), "a password written in is never echoed"
    assert str(tmp_path / "missing.pem") in found[1], "relative to the file's folder"


def test_client_ca_needs_a_policy_and_versions_their_order(pki, tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    path.write_text(f"tls_server_config:\n  cert_file: {pki.server_cert}\n"
                    f"  key_file: {pki.server_key}\n  client_ca_file: {pki.ca}\n"
                    "  min_version: TLS13\n  max_version: TLS12\n"
                    "  client_auth_type: requireandverifyclientcert\n")
    found = problems(path)
    assert found == [
        f"{path}:4: tls_server_config.client_ca_file: a client CA without a client_auth_type: "
        "set client_auth_type: RequireAndVerifyClientCert (or remove client_ca_file)",
        f"{path}:5: tls_server_config.min_version: is above max_version: lower it or raise "
        "max_version",
        f"{path}:7: tls_server_config.client_auth_type: 'requireandverifyclientcert' is not "
        f"one of {', '.join(CLIENT_AUTH)}",
    ]


@pytest.mark.parametrize(("text", "expected"), [
    ("", ": the file is empty: give tls_server_config"),
    ("- tls_server_config\n", ":1: the file must be a mapping of keys to values, not a list"),
    ("tls_server_config: [a]\n", ":1: tls_server_config: tls_server_config must be a mapping"),
    ("basic_auth_users:\n  alice: [1, 2\n", ":3: not valid YAML"),
    ("a: !!python/object:os.system x\n", ":1: not valid YAML"),
    ("basic_auth_users:\n  alice: 12\n", ":2: basic_auth_users.alice: is not a bcrypt hash"),
])
def test_malformed_files_say_where(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "web.yml"
    path.write_text(text)
    found = problems(path)
    assert len(found) == 1 and found[0].startswith(f"{path}{expected}"), found


def test_a_missing_file_or_a_folder_is_one_line(tmp_path: Path) -> None:
    assert problems(tmp_path / "nope.yml") == [
        f"cannot read {tmp_path / 'nope.yml'}: No such file or directory"]
    found = problems(tmp_path)
    assert len(found) == 1 and "not a regular file" in found[0], found


def test_client_auth_types_map_onto_ssl(pki, tmp_path: Path) -> None:
    """Exact where Python can be; RequireAnyClientCert served stricter, and said so."""
    modes = {}
    for auth in CLIENT_AUTH:
        web = read_web_config(write_web_config(tmp_path / f"{auth}.yml", pki,
                                               client_auth=auth))
        assert web.tls is not None
        modes[auth] = (web.tls.client_auth.mode, bool(web.notes))
        context = tls_context(web.tls)
        assert context.verify_mode == web.tls.client_auth.mode
    assert modes == {
        "NoClientCert": (ssl.CERT_NONE, False),
        "RequestClientCert": (ssl.CERT_NONE, False),
        "RequireAnyClientCert": (ssl.CERT_REQUIRED, True),
        "RequireClientCert": (ssl.CERT_REQUIRED, True),
        "VerifyClientCertIfGiven": (ssl.CERT_OPTIONAL, False),
        "RequireAndVerifyClientCert": (ssl.CERT_REQUIRED, False),
    }
    note = read_web_config(tmp_path / "RequireAnyClientCert.yml").notes[0]
    assert "served as RequireAndVerifyClientCert" in note and "\n" not in note


def _tls(pki, tmp_path: Path, **changes: Path) -> TlsConfig:
    base = TlsConfig(pki.server_cert, pki.server_key, "RequireAndVerifyClientCert", pki.ca)
    return TlsConfig(**{**base.__dict__, **changes})


def test_bad_certificates_and_keys_are_one_line_each(pki, tmp_path: Path) -> None:
    other = make_pki(tmp_path / "other")
    encrypted = tmp_path / "encrypted-key.pem"
    key = serialization.load_pem_private_key(pki.server_key.read_bytes(), None)
    encrypted.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"passphrase")))
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    cases = [
        ({"key_file": other.server_key}, "is not the key of cert_file"),
        ({"key_file": encrypted}, "is encrypted and aitop cannot ask for its passphrase"),
        ({"cert_file": garbage}, "holds no PEM certificate"),
        ({"key_file": pki.server_cert}, "holds no PEM private key"),
        ({"client_ca_file": garbage}, "holds no CA certificate"),
    ]
    for changes, text in cases:
        with pytest.raises(ServeError) as caught:
            tls_context(_tls(pki, tmp_path, **changes))
        message = str(caught.value)
        assert text in message and "\n" not in message, (changes, message)
    tls_context(_tls(pki, tmp_path))  # the good pair loads


def _basic(user: str, password: str | bytes) -> str:
    secret = password if isinstance(password, bytes) else password.encode()
    return "Basic " + base64.b64encode(user.encode() + b":" + secret).decode()


def test_basic_auth_lets_in_the_user_with_its_password_only() -> None:
    auth = BasicAuth([(USER, password_hash().encode()), ("grafana", password_hash("g").encode())])
    assert auth.allows(_basic(USER, PASSWORD))
    assert auth.allows(_basic(USER, PASSWORD))  # remembered: no second bcrypt check
    assert auth.allows(_basic("grafana", "g"))
    assert not auth.allows(_basic(USER, "g"))  # another user's password
    assert not auth.allows(_basic("nobody", PASSWORD))
    assert not auth.allows(_basic(USER, PASSWORD + "x"))
    assert not auth.allows(_basic(USER, b"x" * 100))  # past bcrypt's 72 bytes: refused
    for header in (None, "", "Bearer abc", "Basic !!!", "Basic " +
                   base64.b64encode(b"no-colon").decode()):
        assert not auth.allows(header), header
    assert auth.allows(_basic(USER, PASSWORD).replace("Basic", "basic", 1))
    remembered = b"".join(auth._passed)
    assert PASSWORD.encode() not in remembered and len(auth._passed) == 2
