"""``aitop --pid N --serve --web-config``: a real Prometheus scrapes aitop over TLS.

The test makes its own CA (``support.tls``); aitop serves with the CA's server
certificate, TLS 1.3 only, requires a client certificate the CA signed
(RequireAndVerifyClientCert) and a basic-auth user. Prometheus, given the CA,
the client certificate and the password, finds the target up and stores aitop's
series. The same aitop answers a wrong or missing password with 401 and
``WWW-Authenticate``, and refuses a client without a certificate, or speaking
plain HTTP, before any HTTP is spoken; a client that connects and says nothing
holds up no one else's scrape.
"""

from __future__ import annotations

import base64
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from support.processes import sleeping
from support.prometheus import PrometheusServer, start_serve, stop_process, tool
from support.tls import PASSWORD, USER, Pki, make_pki, write_web_config

pytestmark = pytest.mark.attach


def fetch(address: str, context: ssl.SSLContext, password: str | None = None
          ) -> tuple[int, dict[str, str], str]:
    """A GET of /metrics: status, headers and body (4xx included)."""
    request = urllib.request.Request(f"https://{address}/metrics")
    if password is not None:
        token = base64.b64encode(f"{USER}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def refused(address: str, context: ssl.SSLContext | None) -> str:
    """How a connection that must not get an answer ends (fails the test if it gets one)."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        try:
            if context is None:
                raw.sendall(b"GET /metrics HTTP/1.1\r\nHost: aitop\r\n\r\n")
                answer = raw.recv(100)
                assert not answer.startswith(b"HTTP/"), answer
                return f"plain HTTP: connection closed ({answer!r})"
            with context.wrap_socket(raw, server_hostname=host) as tls:
                # TLS 1.3 sends the client's certificate after the client's handshake
                # is done: the server's refusal arrives with the first read.
                tls.sendall(b"GET /metrics HTTP/1.1\r\nHost: aitop\r\n\r\n")
                answer = tls.recv(100)
                assert not answer.startswith(b"HTTP/"), answer
                return f"closed ({answer!r})"
        except (ssl.SSLError, ConnectionError) as exc:
            return f"{type(exc).__name__}: {exc}"


def scrape_settings(pki: Pki, folder: Path) -> dict[str, object]:
    password_file = folder / "prometheus-password"
    password_file.write_text(PASSWORD)
    password_file.chmod(0o600)
    return {
        "scheme": "https",
        "tls_config": {"ca_file": str(pki.ca), "cert_file": str(pki.client_cert),
                       "key_file": str(pki.client_key)},
        "basic_auth": {"username": USER, "password_file": str(password_file)},
    }


def test_prometheus_scrapes_aitop_over_tls_with_a_client_certificate_and_a_password(
        tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    config = write_web_config(tmp_path / "web.yml", pki, client_auth="RequireAndVerifyClientCert",
                              users={USER: PASSWORD}, min_version="TLS13")
    version = subprocess.run([tool("prometheus"), "--version"], capture_output=True, text=True,
                             check=True).stdout.splitlines()[0]
    with sleeping() as job:
        serve, address = start_serve(job.pid, "--web-config", str(config))
        prometheus = None
        try:
            prometheus = PrometheusServer(tmp_path, [address],
                                          scrape=scrape_settings(pki, tmp_path))
            up = prometheus.wait_for('up{job="aitop"} == 1', timeout=60)
            series = prometheus.wait_for(f'aitop_target_info{{pid="{job.pid}"}}', timeout=60)
            target = prometheus.api("targets")["activeTargets"][0]
            assert target["scrapeUrl"].startswith("https://"), target
            assert target["health"] == "up" and not target["lastError"], target

            # What the server negotiates (TLS 1.3 is all it accepts here: Prometheus too).
            host, port = address.rsplit(":", 1)
            with socket.create_connection((host, int(port))) as raw, \
                    pki.client_context().wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                negotiated = tls.version()
            print(f"{version}; scraped {address} over TLS 1.3 only (min_version TLS13), "
                  f"with a client certificate and basic auth; {len(up)} target up, "
                  f"aitop_target_info {series[0]['metric'].get('command', '')[:40]!r}; "
                  f"a Python client negotiated {negotiated}")
            assert negotiated == "TLSv1.3"

            # The same server, asked without the right credentials, while a client that
            # connected and never began its handshake waits (it holds its own thread only).
            good = pki.client_context()
            with socket.create_connection((host, int(port))):
                status, _, body = fetch(address, good, PASSWORD)
            assert status == 200 and "aitop_up" in body
            for password in ("wrong", None):
                status, headers, _ = fetch(address, good, password)
                assert status == 401, (password, status)
                assert headers.get("WWW-Authenticate", "").startswith("Basic"), headers
            no_cert = refused(address, pki.client_context(with_cert=False))
            plain = refused(address, None)
            print(f"without a client certificate: {no_cert}; {plain}")
            assert serve.poll() is None, "refused clients leave the server serving"
            status, _, _ = fetch(address, good, PASSWORD)
            assert status == 200
        finally:
            if prometheus is not None:
                prometheus.stop()
            assert stop_process(serve) in (0, -15)
            assert serve.stderr is not None
            rest = serve.stderr.read()
            assert "Traceback" not in rest, rest
