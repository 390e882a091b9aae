"""``aitop [--pid P] --serve [ADDR:]PORT``: a headless Prometheus exporter.

With ``--pid``, for that one job; without, the node agent (``engine.fleet``) for
every PyTorch job on the machine, each job's series labelled with its identity.

The port is bound before attaching, so a port in use or a bad address ends at
once in one line (exit 1, or 2 for a malformed ``--serve``) and the job is never
touched. Loopback unless an address is given: the metrics describe someone's
process, and exposing them to the network is a decision, not a default.
``--web-config FILE`` (the exporter toolkit's format, ``prometheus.webconfig``)
adds TLS, client certificates and basic auth; off loopback, a TLS key that others
may read is refused, and metrics served without TLS are said to be (one line).

The loop publishes a frame a second (``exporter.Publisher``); scrapes only read
the newest frame. It runs until the job exits or aitop is stopped (Ctrl-C,
SIGTERM, SIGHUP), then exits 0 (after writing ``--export`` if asked).
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from wsgiref.simple_server import WSGIServer

from aitop.engine.commands.rule_files import knowledge_of
from aitop.engine.errors import EXIT_OK, EXIT_USAGE, STOP_SIGNALS, CliError
from aitop.engine.fleet.agent import SCAN_EVERY_S, NodeAgent
from aitop.engine.fleet.model import Fleet
from aitop.engine.headless.export import export_snapshot
from aitop.engine.headless.options import options_from, start_source
from aitop.engine.live.attach import LiveJob, self_cpu_seconds, self_rss_bytes
from aitop.engine.prometheus.exporter import AitopCollector, Publisher
from aitop.engine.prometheus.web import Listening, ServeError, resolve, serve, tls_context
from aitop.engine.prometheus.webconfig import WebConfig, WebConfigError, read_web_config
from aitop.probes.job_identity import identify
from prometheus_client import CollectorRegistry

#: How often the serve loop publishes a frame (the evaluator's own cadence).
PUBLISH_EVERY_S = 1.0
DEFAULT_HOST = "127.0.0.1"


def parse_address(text: str) -> tuple[str, int]:
    """``9400`` -> (127.0.0.1, 9400); ``0.0.0.0:9400``, ``[::1]:9400``, ``host:0``.

    Raises ``CliError`` (exit 2) with what to write instead.
    """
    value = text.strip()
    host = DEFAULT_HOST
    port_text = value
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or value[end + 1 : end + 2] != ":":
            raise CliError(f"--serve {text!r}: write an IPv6 address as [ADDR]:PORT", EXIT_USAGE)
        host, port_text = value[1:end], value[end + 2 :]
    elif ":" in value:
        host, _, port_text = value.rpartition(":")
        if ":" in host:
            raise CliError(f"--serve {text!r}: write an IPv6 address as [ADDR]:PORT", EXIT_USAGE)
    if not host:
        raise CliError(f"--serve {text!r}: give an address before ':' (0.0.0.0 for every "
                       "interface), or only the port for loopback", EXIT_USAGE)
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise CliError(f"--serve {text!r}: the port must be a number from 0 to 65535 "
                       "(e.g. --serve 9400 or --serve 0.0.0.0:9400)", EXIT_USAGE)
    return host, int(port_text)


def url_of(host: str, port: int, scheme: str = "http") -> str:
    try:
        bracket = ipaddress.ip_address(host).version == 6
    except ValueError:
        bracket = False
    return f"{scheme}://[{host}]:{port}/metrics" if bracket else f"{scheme}://{host}:{port}/metrics"


def web_config_of(args: argparse.Namespace) -> WebConfig | None:
    """``--web-config``, read and checked whole: every problem, one line each (exit 2)."""
    if args.web_config is None:
        return None
    try:
        return read_web_config(args.web_config)
    except WebConfigError as exc:
        raise CliError(f"--web-config: {exc}", EXIT_USAGE) from exc


def refuse_shared_key(where: Listening, web: WebConfig) -> None:
    """Off loopback, a TLS key that its group or others may read is no secret: refuse."""
    if where.loopback or web.tls is None:
        return
    key = web.tls.key_file
    try:
        mode = key.stat().st_mode
    except OSError as exc:
        raise CliError(f"cannot read key_file {key}: {exc.strerror or exc}", EXIT_USAGE) from exc
    if mode & (stat.S_IRGRP | stat.S_IROTH):
        raise CliError(f"refusing to serve on {where.address}: key_file {key} is readable by "
                       f"its group or others (mode {stat.S_IMODE(mode):04o}): `chmod 600 {key}`, "
                       "or serve on loopback", EXIT_USAGE)


def bind(args: argparse.Namespace) -> tuple[WSGIServer, AitopCollector, str]:
    """The exporter's port, bound before anything is attached (a port in use is one line).

    With ``--web-config``, its TLS and basic auth; off loopback, a key others may read is
    refused and serving without TLS is said (one line each).
    """
    host, port = parse_address(args.serve)
    web = web_config_of(args)
    try:
        where = resolve(host, port)
    except OSError as exc:
        raise _bind_error(host, port, exc) from exc
    if web is not None:
        refuse_shared_key(where, web)
    try:
        tls = tls_context(web.tls) if web is not None and web.tls is not None else None
    except ServeError as exc:
        raise CliError(f"--web-config {args.web_config}: {exc}", EXIT_USAGE) from exc
    collector = AitopCollector(self_cpu_seconds=self_cpu_seconds, self_rss_bytes=self_rss_bytes)
    registry = CollectorRegistry()
    registry.register(collector)
    try:
        server, _thread = serve(where, registry, web, tls)
    except OSError as exc:
        raise _bind_error(host, port, exc) from exc
    for note in web.notes if web is not None else ():
        print(f"aitop: {note}", file=sys.stderr, flush=True)
    if tls is None and not where.loopback:
        passwords = "; basic-auth passwords cross it in the clear too" if web and web.users else ""
        print(f"aitop: serving metrics in the clear (no TLS) on {where.address}: anyone on the "
              f"network can read them{passwords}; give --web-config FILE with "
              "tls_server_config to encrypt them", file=sys.stderr, flush=True)
    return server, collector, url_of(host, server.server_port, "http" if tls is None else "https")


def _bind_error(host: str, port: int, exc: OSError) -> CliError:
    reason = exc.strerror or str(exc)
    hint = ("another process listens there: pick another port"
            if "in use" in reason else "give a local address or only a port")
    return CliError(f"cannot serve metrics on {host}:{port}: {reason} ({hint})")


def _refuse_gates(args: argparse.Namespace) -> None:
    if args.fail_on or args.baseline:
        flag = "--fail-on" if args.fail_on else "--baseline"
        raise CliError(f"{flag} is not for --serve: alert on aitop_finding_firing or use "
                       "the rules from `aitop rules --format prometheus`", EXIT_USAGE)


def run_serve(
    args: argparse.Namespace, pid: int, popen: subprocess.Popen[bytes] | None = None,
    also: Sequence[int] = (),
) -> int:
    """Bind, attach, publish until the job ends or aitop is stopped."""
    _refuse_gates(args)
    if args.budget is not None or args.match:
        flag = "--budget" if args.budget is not None else "--match"
        raise CliError(f"{flag} is for the node agent: drop --pid to watch the jobs on "
                       "this machine", EXIT_USAGE)
    args.headless = True  # no UI; headless cadences (docs/benchmarks.md)
    options = options_from(args)  # --rules and --export are checked before binding
    server, collector, url = bind(args)
    try:
        source = start_source(pid, options, popen, also)
        try:
            return _publish_until_done(source, collector, url, args.export)
        finally:
            source.close()
    finally:
        server.shutdown()
        server.server_close()


def run_agent(args: argparse.Namespace) -> int:
    """``--serve`` without ``--pid``: every PyTorch job on this machine, until stopped."""
    _refuse_gates(args)
    if args.export is not None:
        raise CliError("--export is for one job: give --pid, or keep the fleet's history in "
                       "Prometheus", EXIT_USAGE)
    args.headless = True
    # One knowledge base for every job; a bad rule file ends here, not job by job.
    options = dataclasses.replace(options_from(args), knowledge=knowledge_of(args.rules))
    server, collector, url = bind(args)
    agent = NodeAgent(Fleet(options, budget_percent=args.budget, match=tuple(args.match)))
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    handled = (*STOP_SIGNALS, signal.SIGINT)
    previous = {sig: signal.signal(sig, on_signal) for sig in handled}
    # An agent serves a list of jobs from its first scrape on (none found yet), never
    # the single-job exporter's unlabelled aitop_up.
    collector.publish_jobs([], [], agent.gauges())
    budget = f", within {args.budget:g}% of a core" if args.budget is not None else ""
    print(f"aitop: node agent serving Prometheus metrics for every PyTorch job on this "
          f"machine at {url}{budget} (Ctrl-C stops)", file=sys.stderr, flush=True)
    next_scan = 0.0
    try:
        while not stop.is_set():
            now = time.time()
            if now >= next_scan:
                agent.poll(now)
                next_scan = now + SCAN_EVERY_S
            frames, infos = agent.frames(now)
            collector.publish_jobs(frames, infos, agent.gauges())
            stop.wait(PUBLISH_EVERY_S)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        agent.close()
        server.shutdown()
        server.server_close()
    return EXIT_OK


def _publish_until_done(
    source: LiveJob, collector: AitopCollector, url: str, export: Path | None
) -> int:
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    handled = (*STOP_SIGNALS, signal.SIGINT)
    previous = {sig: signal.signal(sig, on_signal) for sig in handled}
    session = source.session
    identity = identify(session.target_pid, source.launcher_pid)
    publisher = Publisher(source, source.rules, source.started_at, identity.labels())
    collector.publish(publisher.frame(time.time()))  # scrapes from now on see the job
    print(f"aitop: serving Prometheus metrics for PID {session.target_pid} at {url} "
          "(Ctrl-C stops)", file=sys.stderr, flush=True)
    try:
        while not stop.is_set():
            collector.publish(publisher.frame(time.time()))
            if session.target_exited_at is not None:
                # One more evaluation lands the last live verdict, then stop.
                stop.wait(1.5)
                collector.publish(publisher.frame(time.time()))
                print(f"aitop: PID {session.target_pid} exited; stopped serving",
                      file=sys.stderr)
                break
            stop.wait(PUBLISH_EVERY_S)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if export is not None:
        export_snapshot(source, export)
    return EXIT_OK
