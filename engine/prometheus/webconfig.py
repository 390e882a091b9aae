"""``--web-config FILE``: TLS and basic auth for ``--serve``, in the exporter toolkit's format.

The file is the one node_exporter and the other Go exporters take as
``--web.config.file`` (prometheus/exporter-toolkit's ``docs/web-configuration.md``),
so one file can serve a node's exporters alike. It is read with the knowledge
base's safe YAML reader (``yaml.SafeLoader`` plus line numbers), to its end:
every problem is reported at once, each as ``file:line: key: what to do``.
Relative paths are relative to the file's own folder, as the toolkit reads them.

What aitop cannot honour is refused by name rather than ignored: a key the
toolkit knows but Python's ``ssl`` module cannot express (Go cipher-suite and
curve names, inline certificates, SAN allow-lists, rate limits) says so and
what to do. The client-certificate policies map onto ``ssl`` as
:data:`CLIENT_AUTH` says; the one that cannot be mapped exactly (Go's
RequireAnyClientCert, which requires a certificate but checks nothing about it)
is served stricter, verified against ``client_ca_file``, and says so at start.
"""

from __future__ import annotations

import difflib
import os
import re
import ssl
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aitop.engine.files import FileError, read_bounded
from aitop.knowledge.reading.yamlio import (
    KnowledgeError,
    Located,
    Problem,
    load_yaml_text,
    one_line,
)

#: A web configuration is a few lines; anything larger is the wrong file.
MAX_FILE_BYTES = 64 * 1024


@dataclass(frozen=True)
class ClientAuth:
    """How one of the toolkit's ``client_auth_type`` values is served."""

    mode: ssl.VerifyMode
    #: Only served with ``client_ca_file`` (Python verifies whatever it requires).
    needs_ca: bool = False
    #: Said once at start when the mapping is not exact; empty when it is.
    note: str = ""


_ANY_CERT = ClientAuth(
    ssl.CERT_REQUIRED, needs_ca=True,
    note="served as RequireAndVerifyClientCert: Python's ssl module verifies every client "
         "certificate it requires, so only certificates client_ca_file signed are let in")

#: The toolkit's policies (Go's ``tls.ClientAuthType``) on Python's ``ssl``:
#: NoClientCert, VerifyClientCertIfGiven and RequireAndVerifyClientCert are exact
#: (without ``client_ca_file`` both Go and Python verify against the system's CAs).
#: RequestClientCert asks for a certificate and never checks it: aitop reads no
#: certificate, so not asking lets in the same clients. RequireAnyClientCert (and
#: its old name RequireClientCert) cannot be mapped exactly: see ``_ANY_CERT``.
CLIENT_AUTH: Mapping[str, ClientAuth] = {
    "NoClientCert": ClientAuth(ssl.CERT_NONE),
    "RequestClientCert": ClientAuth(ssl.CERT_NONE),
    "RequireAnyClientCert": _ANY_CERT,
    "RequireClientCert": _ANY_CERT,
    "VerifyClientCertIfGiven": ClientAuth(ssl.CERT_OPTIONAL),
    "RequireAndVerifyClientCert": ClientAuth(ssl.CERT_REQUIRED),
}

TLS_VERSIONS: Mapping[str, ssl.TLSVersion] = {
    "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3,
}

#: The response headers the toolkit lets a file set, with the values it allows (None: any).
HEADERS: Mapping[str, tuple[str, ...] | None] = {
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
}

#: A bcrypt hash as Go's and Python's bcrypt write it: $2a$, $2b$ or $2y$, cost, 53 characters.
BCRYPT_HASH = re.compile(r"\$2[aby]\$(0[4-9]|[12]\d|3[01])\$[./A-Za-z0-9]{53}")

#: Keys the toolkit knows that aitop does not honour, and what to do instead.
UNSUPPORTED: Mapping[str, str] = {
    "rate_limit": "aitop has no rate limiter: remove it (a scrape reads one prepared frame)",
    "tls_server_config.cert": "inline certificates are not read: write it to a file and "
                              "give cert_file",
    "tls_server_config.key": "inline keys are not read: write it to a file with mode 600 and "
                             "give key_file",
    "tls_server_config.client_ca": "inline CAs are not read: write it to a file and give "
                                   "client_ca_file",
    "tls_server_config.cipher_suites": "Go's cipher-suite names have no exact OpenSSL "
                                       "equivalent here: remove it (aitop uses OpenSSL's "
                                       "defaults; TLS 1.3's suites are fixed)",
    "tls_server_config.curve_preferences": "Python's ssl module cannot set the curve list: "
                                           "remove it",
    "tls_server_config.client_allowed_sans": "aitop cannot match client SANs: remove it and "
                                             "give each client a certificate of its own CA "
                                             "(client_ca_file)",
}

_TOP = ("tls_server_config", "http_server_config", "basic_auth_users")
_TLS = ("cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version",
        "max_version", "prefer_server_cipher_suites")
_HTTP = ("http2", "headers")


@dataclass(frozen=True)
class TlsConfig:
    """``tls_server_config``, checked: the paths are absolute and existed when read."""

    cert_file: Path
    key_file: Path
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    max_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3

    @property
    def client_auth(self) -> ClientAuth:
        return CLIENT_AUTH[self.client_auth_type]


@dataclass(frozen=True)
class WebConfig:
    """A web configuration file, checked whole. No field holds a password."""

    path: Path
    tls: TlsConfig | None = None
    #: User name -> bcrypt hash; empty: no basic auth.
    users: tuple[tuple[str, bytes], ...] = ()
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def notes(self) -> tuple[str, ...]:
        """What to say at start: the mappings that are not exact."""
        if self.tls is None or not self.tls.client_auth.note:
            return ()
        return (f"{self.path}: client_auth_type {self.tls.client_auth_type} is "
                f"{self.tls.client_auth.note}",)


class WebConfigError(ValueError):
    """The file cannot be served from: one line per problem, each ``file:line: ...``."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = tuple(sorted(problems, key=lambda p: p.line or 0))  # in file order
        super().__init__("\n".join(str(p) for p in self.problems))


def read_web_config(path: Path) -> WebConfig:
    """The checked configuration in ``path``; raises :class:`WebConfigError` listing
    every problem found."""
    name = str(path)
    try:
        text = read_bounded(path, MAX_FILE_BYTES, what="a web configuration",
                            hint="give the exporter toolkit's web configuration file"
                            ).decode("utf-8")
        data = load_yaml_text(text, name)
    except FileError as exc:
        raise WebConfigError([Problem(one_line(str(exc)))]) from exc
    except UnicodeDecodeError as exc:
        raise WebConfigError([Problem("not UTF-8 text: save the file as UTF-8", name)]) from exc
    except KnowledgeError as exc:
        raise WebConfigError(list(exc.problems)) from exc
    reader = _Reader(name, path.parent)
    config = reader.config(path, data)
    if reader.problems:
        raise WebConfigError(reader.problems)
    assert config is not None
    return config


class _Reader:
    """Walks the parsed file, keeping every problem with the line it was found at."""

    def __init__(self, file: str, folder: Path) -> None:
        self.file = file
        self.folder = folder
        self.problems: list[Problem] = []

    def problem(self, key: str, what: str, line: int | None) -> None:
        self.problems.append(Problem(one_line(f"{key}: {what}" if key else what),
                                     self.file, line))

    def config(self, path: Path, data: Any) -> WebConfig | None:
        if data is None:
            self.problem("", "the file is empty: give tls_server_config (TLS) and/or "
                         "basic_auth_users (see the README's Prometheus section)", None)
            return None
        top = self.mapping("", data, 1)
        if top is None:
            return None
        self.known_keys("", top, _TOP)
        tls = self.tls(top)
        http = self.mapping("http_server_config", top.get("http_server_config"),
                            top.lines.get("http_server_config"))
        headers: tuple[tuple[str, str], ...] = ()
        if http is not None:
            self.known_keys("http_server_config", http, _HTTP)
            # aitop answers HTTP/1.1 (which every Prometheus speaks): http2 is accepted.
            self.typed("http_server_config.http2", http, "http2", bool, "true or false")
            headers = self.headers(http)
        users = self.users(top)
        return WebConfig(path, tls, users, headers)

    # ------------------------------------------------------------ shapes

    def mapping(self, key: str, value: Any, line: int | None) -> Located | None:
        """``value`` if it is a mapping; None (a problem unless absent or null) if not."""
        if value is None:
            return None
        if isinstance(value, Located):
            return value
        where = f"{key} " if key else "the file "
        self.problem(key, f"{where}must be a mapping of keys to values, not "
                     f"{_kind(value)}", line)
        return None

    def known_keys(self, prefix: str, data: Located, known: tuple[str, ...]) -> None:
        for key in data:
            dotted = f"{prefix}.{key}" if prefix else key
            line = data.key_lines.get(key)
            if key in known:
                continue
            if dotted in UNSUPPORTED:
                self.problem(dotted, UNSUPPORTED[dotted], line)
                continue
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]}?" if close else f"the keys here are {', '.join(known)}"
            self.problem(dotted, f"unknown key: {hint}", line)

    def typed(self, dotted: str, data: Located, key: str, kind: type, words: str) -> Any:
        value = data.get(key)
        if value is None or isinstance(value, kind):
            return value
        self.problem(dotted, f"must be {words}, not {_kind(value)}", data.lines.get(key))
        return None

    def choice(self, dotted: str, data: Located, key: str, choices: Mapping[str, Any],
               why: Callable[[str], str] = lambda _: "") -> Any:
        value = self.typed(dotted, data, key, str, f"one of {', '.join(choices)}")
        if value is None or value in choices:
            return choices.get(value) if value is not None else None
        self.problem(dotted, f"{value!r} is not one of {', '.join(choices)}{why(value)}",
                     data.lines.get(key))
        return None

    def path_at(self, dotted: str, data: Located, key: str) -> Path | None:
        """A path that names a readable regular file, relative to the config's folder."""
        value = self.typed(dotted, data, key, str, "a file path")
        line = data.lines.get(key)
        if value is None:
            return None
        if not value.strip():
            self.problem(dotted, "is empty: give a file path", line)
            return None
        path = Path(value) if os.path.isabs(value) else self.folder / value
        try:
            if not stat.S_ISREG(path.stat().st_mode):  # before open: a FIFO would block
                self.problem(dotted, f"{path} is not a regular file: give a PEM file", line)
                return None
            with path.open("rb"):
                pass
        except OSError as exc:
            self.problem(dotted, f"cannot read {path}: {exc.strerror or exc}", line)
            return None
        return path.absolute()

    # ------------------------------------------------------------ sections

    def tls(self, top: Located) -> TlsConfig | None:
        data = self.mapping("tls_server_config", top.get("tls_server_config"),
                            top.lines.get("tls_server_config"))
        if data is None:
            return None
        prefix = "tls_server_config"
        self.known_keys(prefix, data, _TLS)
        section = top.key_lines.get("tls_server_config")
        paths = {key: self.path_at(f"{prefix}.{key}", data, key)
                 for key in ("cert_file", "key_file", "client_ca_file")}
        for key in ("cert_file", "key_file"):
            if data.get(key) is None:
                self.problem(f"{prefix}.{key}", "missing: TLS needs cert_file and key_file",
                             section)
        auth = self.typed(f"{prefix}.client_auth_type", data, "client_auth_type", str,
                          "a client_auth_type")
        auth_line = data.lines.get("client_auth_type", section)
        if auth is not None and auth not in CLIENT_AUTH:
            self.problem(f"{prefix}.client_auth_type", f"{auth!r} is not one of "
                         f"{', '.join(CLIENT_AUTH)}", auth_line)
            auth = None
        auth = auth or "NoClientCert"
        if data.get("client_ca_file") is not None and auth == "NoClientCert":
            self.problem(f"{prefix}.client_ca_file", "a client CA without a client_auth_type: "
                         "set client_auth_type: RequireAndVerifyClientCert (or remove "
                         "client_ca_file)", data.lines.get("client_ca_file"))
        if CLIENT_AUTH[auth].needs_ca and data.get("client_ca_file") is None:
            self.problem(f"{prefix}.client_auth_type", f"{auth} needs client_ca_file here: "
                         "Python's ssl module verifies every client certificate it requires; "
                         "give the CA that signed the clients' certificates", auth_line)
        low = self.choice(f"{prefix}.min_version", data, "min_version", TLS_VERSIONS,
                          _too_old)
        high = self.choice(f"{prefix}.max_version", data, "max_version", TLS_VERSIONS,
                           _too_old)
        low = low or ssl.TLSVersion.TLSv1_2
        high = high or ssl.TLSVersion.TLSv1_3
        if low > high:
            self.problem(f"{prefix}.min_version", "is above max_version: lower it or raise "
                         "max_version", data.lines.get("min_version"))
        self.typed(f"{prefix}.prefer_server_cipher_suites", data,
                   "prefer_server_cipher_suites", bool, "true or false")
        cert_path, key_path = paths["cert_file"], paths["key_file"]
        if cert_path is None or key_path is None:
            return None
        return TlsConfig(cert_path, key_path, auth, paths["client_ca_file"], low, high)

    def headers(self, http: Located) -> tuple[tuple[str, str], ...]:
        data = self.mapping("http_server_config.headers", http.get("headers"),
                            http.lines.get("headers"))
        if data is None:
            return ()
        found = []
        for name, value in data.items():
            dotted = f"http_server_config.headers.{name}"
            line = data.lines.get(name)
            allowed = HEADERS.get(name, ())
            if name not in HEADERS:
                self.problem(dotted, f"cannot be set: the headers here are {', '.join(HEADERS)}",
                             data.key_lines.get(name))
            elif not isinstance(value, str):
                self.problem(dotted, f"must be text, not {_kind(value)}", line)
            elif allowed is not None and value not in allowed:
                self.problem(dotted, f"{value!r} is not one of {', '.join(allowed)}", line)
            else:
                found.append((name, value))
        return tuple(found)

    def users(self, top: Located) -> tuple[tuple[str, bytes], ...]:
        data = self.mapping("basic_auth_users", top.get("basic_auth_users"),
                            top.lines.get("basic_auth_users"))
        if data is None:
            return ()
        users = []
        for user, hashed in data.items():
            dotted = f"basic_auth_users.{user}"
            if ":" in user or not user:
                self.problem(dotted, "a user name cannot be empty or contain ':' (basic auth "
                             "splits on it): rename the user", data.key_lines.get(user))
            elif not isinstance(hashed, str) or not BCRYPT_HASH.fullmatch(hashed):
                # Never quote the value: it may be a password written in by mistake.
                self.problem(dotted, "is not a bcrypt hash: give the hash of the password, "
                             "e.g. from `htpasswd -nBC 10 '' | tr -d ':\\n'`",
                             data.lines.get(user))
            else:
                users.append((user, hashed.encode("ascii")))
        return tuple(users)


def _too_old(version: str) -> str:
    return ": aitop serves TLS 1.2 or newer" if version in ("TLS10", "TLS11") else ""


def _kind(value: Any) -> str:
    if isinstance(value, Located):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    return "text" if isinstance(value, str) else type(value).__name__
