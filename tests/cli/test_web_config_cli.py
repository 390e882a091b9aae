"""``--serve --web-config`` from the command line: the refusals, the warning, the node agent.

* Off loopback, a TLS key its group or others may read is refused in one line
  (exit 2) before anything is attached; metrics served without TLS off loopback
  are said to be, in one line, at start.
* A bad file (a missing certificate, a key of another certificate, a key aitop
  may not read) or a port in use is one line, never a traceback.
* The node agent serves over TLS with basic auth like ``--pid`` does.

The node agent runs with ``--match`` set to the test's folder, so it watches no
job and attaches nothing: these runs cost a process start each.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from support.jobs import run_aitop
from support.processes import sleeping
from support.prometheus import start_serve, stop_process
from support.tls import PASSWORD, USER, make_pki, write_web_config

CLEAR = "serving metrics in the clear (no TLS)"


def one_line_error(result: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got: {result.stderr!r}"
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


def get(url: str, context: ssl.SSLContext | None = None, password: str | None = None,
        header: str = "WWW-Authenticate") -> tuple[int, str]:
    """The status, and the body of a 200 or the ``header`` of another answer."""
    request = urllib.request.Request(url)
    if password is not None:
        token = base64.b64encode(f"{USER}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get(header, "")


def test_a_key_others_may_read_is_refused_off_loopback(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    pki.server_key.chmod(0o644)
    config = write_web_config(tmp_path / "web.yml", pki)
    with sleeping() as job:
        result = run_aitop("--pid", str(job.pid), "--serve", "0.0.0.0:0",
                           "--web-config", str(config), timeout=30)
    line = one_line_error(result, 2, "refusing to serve on 0.0.0.0", str(pki.server_key),
                          "mode 0644", f"chmod 600 {pki.server_key}")
    print(line)


def test_metrics_in_the_clear_off_loopback_are_said_at_start(tmp_path: Path) -> None:
    said: list[str] = []
    agent, address = start_serve(None, "--match", str(tmp_path), serve="0.0.0.0:0", said=said)
    try:
        port = address.rsplit(":", 1)[1]
        status, body = get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200 and "aitop_build_info" in body
    finally:
        stop_process(agent)
    warnings = [line for line in said if CLEAR in line]
    print(warnings)
    assert len(warnings) == 1 and "--web-config" in warnings[0], said
    assert "passwords" not in warnings[0]

    # Basic auth without TLS: the passwords are said to cross in the clear too.
    config = write_web_config(tmp_path / "auth-only.yml", None, users={USER: PASSWORD})
    said = []
    agent, address = start_serve(None, "--match", str(tmp_path), "--web-config", str(config),
                                 serve="0.0.0.0:0", said=said)
    try:
        url = f"http://127.0.0.1:{address.rsplit(':', 1)[1]}/metrics"
        assert get(url) == (401, 'Basic realm="aitop", charset="UTF-8"')
        assert get(url, password=PASSWORD)[0] == 200
    finally:
        stop_process(agent)
    assert any(CLEAR in line and "passwords" in line for line in said), said

    # On loopback nothing is said.
    said = []
    agent, _ = start_serve(None, "--match", str(tmp_path), said=said)
    stop_process(agent)
    assert not any(CLEAR in line for line in said), said


def test_the_node_agent_serves_over_tls_with_basic_auth(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    config = write_web_config(tmp_path / "web.yml", pki, client_auth="VerifyClientCertIfGiven",
                              users={USER: PASSWORD})
    with config.open("a") as f:
        f.write("http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    said: list[str] = []
    agent, address = start_serve(None, "--match", str(tmp_path), "--web-config", str(config),
                                 said=said)
    try:
        assert f"https://{address}/metrics" in said[-1], said
        url = f"https://{address}/metrics"
        status, body = get(url, pki.client_context(), PASSWORD)
        assert status == 200 and "aitop_build_info" in body, body[:500]
        # VerifyClientCertIfGiven: no certificate is fine, the password is still needed.
        assert get(url, pki.client_context(with_cert=False), PASSWORD)[0] == 200
        assert get(url, pki.client_context(with_cert=False), "wrong")[0] == 401
        # The file's headers on every answer, a 401 included.
        assert get(url, pki.client_context(), "wrong", header="X-Frame-Options") == (401, "deny")
        with pytest.raises(urllib.error.URLError):  # a client that does not trust the CA
            get(url, ssl.create_default_context(), PASSWORD)
    finally:
        assert stop_process(agent) == 0
    assert not any(CLEAR in line for line in said), said


def test_bad_files_and_a_taken_port_are_one_line_each(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    other = make_pki(tmp_path / "other")
    missing = tmp_path / "missing.yml"
    missing.write_text(f"tls_server_config:\n  cert_file: nope.pem\n  key_file: {pki.server_key}\n")
    mismatched = tmp_path / "mismatched.yml"
    mismatched.write_text(f"tls_server_config:\n  cert_file: {pki.server_cert}\n"
                          f"  key_file: {other.server_key}\n")
    agent = ("--serve", "127.0.0.1:0", "--match", str(tmp_path))
    result = run_aitop(*agent, "--web-config", str(missing), timeout=30)
    one_line_error(result, 2, f"{missing}:2: tls_server_config.cert_file: cannot read "
                   f"{tmp_path / 'nope.pem'}: No such file or directory")
    result = run_aitop(*agent, "--web-config", str(mismatched), timeout=30)
    one_line_error(result, 2, f"key_file {other.server_key} is not the key of cert_file "
                   f"{pki.server_cert}")
    result = run_aitop("--web-config", str(mismatched), "--pid", "1", timeout=30)
    one_line_error(result, 2, "--web-config is for --serve")

    good = write_web_config(tmp_path / "good.yml", pki)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_aitop("--serve", f"127.0.0.1:{port}", "--match", str(tmp_path),
                           "--web-config", str(good), timeout=30)
    one_line_error(result, 1, "cannot serve metrics", "pick another port")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: to run aitop as another user")
def test_a_key_aitop_may_not_read_is_one_line() -> None:
    """Run as nobody: the configuration and certificate are readable, the key (root's,
    mode 600) is not."""
    folder = Path(tempfile.mkdtemp(prefix="aitop-web-config-"))
    try:
        folder.chmod(0o755)
        pki = make_pki(folder / "pki")
        (folder / "pki").chmod(0o755)
        pki.server_cert.chmod(0o644)
        config = write_web_config(folder / "web.yml", pki)
        config.chmod(0o644)
        result = run_aitop("--serve", "127.0.0.1:0", "--match", str(folder),
                           "--web-config", str(config), user="65534", timeout=30)
        one_line_error(result, 2, f"{config}:3: tls_server_config.key_file: cannot read "
                       f"{pki.server_key}: Permission denied")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
