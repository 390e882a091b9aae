"""The exporter's HTTP server: prometheus_client's WSGI app, behind TLS and basic auth if asked.

The app is ``prometheus_client.make_wsgi_app`` as ``start_http_server`` serves it
(every path answers the metrics, ``/favicon.ico`` is empty, gzip on request),
on a threading ``wsgiref`` server that logs nothing. Two things differ from
``start_http_server``, both for a port that faces a network:

* TLS is not put on the listening socket. There each handshake would run in the
  accept loop, so one client that connects and sends nothing would hold up
  every scrape; here each connection's handshake runs on its own thread, under
  :data:`HANDSHAKE_TIMEOUT_S`, and a failed one closes that connection only.
* Basic auth wraps the app, as the exporter toolkit's handler does: every path
  needs a user of ``basic_auth_users`` and its password, checked with bcrypt
  (one check at a time, each costing what its hash's cost says), else 401 with
  ``WWW-Authenticate``. A password that passed is remembered as a keyed digest
  (never the password itself), so Prometheus' scrape every few seconds costs
  one bcrypt check, not one each.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import os
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import bcrypt
from aitop.engine.prometheus.webconfig import TlsConfig, WebConfig
from prometheus_client import make_wsgi_app
from prometheus_client.registry import Collector

#: Longest a client may take to finish its TLS handshake.
HANDSHAKE_TIMEOUT_S = 10.0
#: Longest a connection may stay silent mid-request (a scrape takes milliseconds).
IDLE_TIMEOUT_S = 30.0
#: Passwords that passed, remembered (as keyed digests) to spare a bcrypt check.
REMEMBERED = 16

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class ServeError(Exception):
    """The server cannot start as configured: one line saying what to do."""


# ---------------------------------------------------------------- TLS


class _Encrypted(Exception):
    """OpenSSL asked for the key's passphrase (it would otherwise prompt on the terminal)."""


def _no_passphrase() -> bytes:
    raise _Encrypted


def _holds(path: os.PathLike[str], *markers: bytes) -> bool:
    try:
        with open(path, "rb") as handle:
            data = handle.read(1 << 20)
    except OSError:
        return True  # load_cert_chain will say why
    return all(marker in data for marker in markers)


def tls_context(tls: TlsConfig) -> ssl.SSLContext:
    """A server context for ``tls``; raises :class:`ServeError` naming the file at fault."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = tls.min_version
    context.maximum_version = tls.max_version
    cert, key = tls.cert_file, tls.key_file
    if not _holds(cert, b"-----BEGIN CERTIFICATE-----"):
        raise ServeError(f"cert_file {cert} holds no PEM certificate: give the server's "
                         "certificate (-----BEGIN CERTIFICATE-----)")
    if not _holds(key, b"-----BEGIN ", b"PRIVATE KEY-----"):
        raise ServeError(f"key_file {key} holds no PEM private key: give the key of "
                         f"{cert.name} (-----BEGIN PRIVATE KEY-----)")
    try:
        context.load_cert_chain(cert, key, password=_no_passphrase)
    except _Encrypted as exc:
        raise ServeError(f"key_file {key} is encrypted and aitop cannot ask for its "
                         f"passphrase: write it decrypted with mode 600 (`openssl pkey -in "
                         f"{key} -out KEY`)") from exc
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise ServeError(f"key_file {key} is not the key of cert_file {cert}: give the "
                             "key the certificate was made for") from exc
        raise ServeError(f"cannot load cert_file {cert} with key_file {key}: "
                         f"{exc.reason or exc}") from exc
    except OSError as exc:
        raise ServeError(f"cannot read cert_file {cert} or key_file {key}: "
                         f"{exc.strerror or exc}") from exc
    if tls.client_auth.mode != ssl.CERT_NONE:
        try:
            if tls.client_ca_file is not None:
                context.load_verify_locations(cafile=tls.client_ca_file)
            else:  # as Go does without ClientCAs: the system's CAs
                context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        except ssl.SSLError as exc:
            raise ServeError(f"client_ca_file {tls.client_ca_file} holds no CA certificate "
                             f"({exc.reason or exc}): give the PEM certificate of the CA "
                             "that signed the clients' certificates") from exc
        except OSError as exc:
            raise ServeError(f"cannot read client_ca_file {tls.client_ca_file}: "
                             f"{exc.strerror or exc}") from exc
        context.verify_mode = tls.client_auth.mode
    return context


# ---------------------------------------------------------------- basic auth


class BasicAuth:
    """Checks ``Authorization: Basic`` against bcrypt hashes, in constant time per user."""

    def __init__(self, users: Iterable[tuple[str, bytes]]) -> None:
        self._users = {user.encode("utf-8"): hashed for user, hashed in users}
        if not self._users:
            raise ValueError("basic auth needs at least one user")
        #: An unknown user is checked against a real hash all the same, so that the
        #: time an answer takes does not tell which user names exist.
        self._decoy = next(iter(self._users.values()))
        self._key = os.urandom(32)
        self._passed: list[bytes] = []
        self._lock = threading.Lock()

    def allows(self, header: str | None) -> bool:
        credentials = _credentials(header)
        if credentials is None:
            return False
        user, password = credentials
        digest = hmac.new(self._key, user + b":" + password, hashlib.sha256).digest()
        with self._lock:
            remembered = False
            for seen in self._passed:  # every entry compared: no early exit
                remembered |= hmac.compare_digest(seen, digest)
            if remembered:
                return True
            hashed = self._users.get(user)
            try:  # bcrypt compares in constant time; one check at a time (CPU-bound)
                ok = bcrypt.checkpw(password, hashed or self._decoy) and hashed is not None
            except ValueError:  # longer than bcrypt's 72 bytes
                ok = False
            if ok:
                self._passed = [*self._passed[-(REMEMBERED - 1):], digest]
        return ok


def _credentials(header: str | None) -> tuple[bytes, bytes] | None:
    """(user, password) of a Basic ``Authorization`` header, None if there is none."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, colon, password = decoded.partition(b":")
    return (user, password) if colon else None


def guarded(app: WsgiApp, auth: BasicAuth) -> WsgiApp:
    """``app`` for requests whose credentials ``auth`` allows; 401 for the others."""

    def guarded_app(environ: dict[str, Any], start_response: Callable[..., Any]
                    ) -> Iterable[bytes]:
        if auth.allows(environ.get("HTTP_AUTHORIZATION")):
            return app(environ, start_response)
        start_response("401 Unauthorized", [
            ("WWW-Authenticate", 'Basic realm="aitop", charset="UTF-8"'),
            ("Content-Type", "text/plain; charset=utf-8"),
        ])
        return [b"401 Unauthorized: give the user and password of --web-config's "
                b"basic_auth_users\n"]

    return guarded_app


def with_headers(app: WsgiApp, headers: tuple[tuple[str, str], ...]) -> WsgiApp:
    """``app`` with ``http_server_config.headers`` on every answer (401s included)."""

    def app_with_headers(environ: dict[str, Any], start_response: Callable[..., Any]
                         ) -> Iterable[bytes]:
        def start(status: str, response: list[tuple[str, str]], *rest: Any) -> Any:
            return start_response(status, [*response, *headers], *rest)

        return app(environ, start)

    return app_with_headers


# ---------------------------------------------------------------- the server


class _QuietHandler(WSGIRequestHandler):
    """One request per connection, logging nothing; silent clients time out."""

    timeout = IDLE_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged (prometheus_client's handler does the same)."""


class MetricsServer(ThreadingMixIn, WSGIServer):
    """A thread per connection; with ``tls``, its handshake runs on that thread."""

    daemon_threads = True
    tls: ssl.SSLContext | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            # On failure wrap_socket closes the connection (no client certificate
            # under RequireAndVerifyClientCert, plain HTTP, a stalled client).
            connection = self.tls.wrap_socket(request, server_side=True)
        except (OSError, ValueError):
            return
        try:
            super().finish_request(connection, client_address)
        finally:
            connection.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up or timed out mid-request: nothing to report, no traceback."""


@dataclass(frozen=True)
class Listening:
    """Where the server listens, resolved before it binds."""

    family: socket.AddressFamily
    address: str
    port: int

    @property
    def loopback(self) -> bool:
        return ipaddress.ip_address(self.address.split("%", 1)[0]).is_loopback


def resolve(host: str, port: int) -> Listening:
    """The address ``host`` binds to (as ``http.server`` picks it); raises ``OSError``."""
    family, _, _, _, sockaddr = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    return Listening(family, str(sockaddr[0]), port)


def serve(where: Listening, registry: Collector, web: WebConfig | None,
          tls: ssl.SSLContext | None) -> tuple[MetricsServer, threading.Thread]:
    """Bind and serve on a daemon thread; raises ``OSError`` if the port cannot be had."""
    app: WsgiApp = make_wsgi_app(registry)
    if web is not None and web.users:
        app = guarded(app, BasicAuth(web.users))
    if web is not None and web.headers:
        app = with_headers(app, web.headers)

    class Server(MetricsServer):
        address_family = where.family

    Server.tls = tls
    server = make_server(where.address, where.port, app, Server, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="aitop-metrics", daemon=True)
    thread.start()
    return server, thread
