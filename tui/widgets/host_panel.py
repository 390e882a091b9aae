"""Host panel: the target and its DataLoader workers, then the machine.

Workers are the usual suspects of a data-loading bottleneck (each pinned at
100 % of a core means they cannot produce batches faster), so they get a line
each when there is room and a summary line always.
"""

from __future__ import annotations

import statistics

from aitop.engine.live.series import latest, recent, tree_cpu, values
from aitop.knowledge.judging import verdicts
from aitop.knowledge.judging.verdicts import Targets
from aitop.probes.samples import ProcessInfo
from rich.text import Text

from . import cuts, fmt
from .panel import Line, Panel, label, spark_line
from .view import View

HISTORY_S = 300.0


def process_line(p: ProcessInfo, name: str, targets: Targets) -> Text:
    """``name  cpu  rss  state`` for one process."""
    text = Text(f"{name:<14}")
    cpu = verdicts.process_cpu(p.cpu_percent, targets)
    text.append(f"{fmt.pct(p.cpu_percent):>6}",
                style=fmt.STATUS_STYLE[cpu] if cpu in ("near", "outside") else "")
    text.append(f" {fmt.human_bytes(p.rss_bytes):>7}")
    text.append(f"  {p.status or '?'}", style="dim")
    return text


def cores_line(per_core: tuple[float, ...], width: int) -> Text:
    """One cell per core, height = load; saturated cores marked (near)."""
    text = label("cores")
    room = max(0, width - text.cell_len)
    for v in per_core[:room]:
        ch = fmt.sparkline([v], 1, lo=0, hi=100)
        text.append(ch, style=fmt.STATUS_STYLE["near"] if v >= cuts.SATURATED_CORE_PERCENT
                    else "")
    if len(per_core) > room:
        text.append("…", style="dim")
    return text


#: Rows of the per-core chart shown when the panel has room to spare.
CORE_CHART_ROWS = 4
BLOCKS = " ▁▂▃▄▅▆▇█"


def core_chart(per_core: tuple[float, ...], width: int) -> list[Line]:
    """A small bar chart, one column per core, for big terminals.

    Bottom rows get the better priority, so a partly shown chart is cut from
    the top, never from its base.
    """
    cell = 2 if len(per_core) * 2 <= width - 8 else 1
    cores = per_core[: max(0, (width - 8) // cell)]
    if not cores:
        return []
    out: list[Line] = []
    for row in range(CORE_CHART_ROWS - 1, -1, -1):
        text = Text("        " if row else f"{'0-' + str(len(cores) - 1):<8}", style="dim")
        for v in cores:
            eighths = round(min(100.0, max(0.0, v)) / 100 * CORE_CHART_ROWS * 8)
            ch = BLOCKS[min(8, max(0, eighths - row * 8))]
            text.append(ch + " " * (cell - 1),
                        style=fmt.STATUS_STYLE["near"] if v >= cuts.SATURATED_CORE_PERCENT else "")
        out.append(Line(text, 12 + row))
    return out


class HostPanel(Panel):
    """The target tree and host CPU, iowait and RAM."""

    TITLE = "Host"
    DETAIL = "processes"

    def subtitle(self, view: View) -> str:
        h = latest(view.session.host, view.now)
        return f"{h.cpu_count} cores" if h is not None else ""

    def lines(self, view: View, width: int) -> list[Line]:
        out: list[Line] = []
        tree = latest(view.session.processes, view.now)
        if tree is None:
            out.append(Line(Text("target: waiting for /proc…", style="dim"), 0))
        elif not tree.alive and not tree.processes:
            out.append(Line(Text("target: exited", style=fmt.STATUS_STYLE["outside"]), 0))
        else:
            main = tree.main
            if main is not None:
                out.append(Line(process_line(main, f"main {main.pid}", view.targets), 0))
            workers = tree.workers
            if workers:
                cpus = [w.cpu_percent for w in workers if w.cpu_percent is not None]
                rss = [w.rss_bytes for w in workers if w.rss_bytes is not None]
                summary = Text(f"{len(workers)} workers".ljust(14))
                if cpus:
                    mean = statistics.fmean(cpus)
                    summary.append(f"{fmt.pct(mean):>6}",
                                   style=fmt.STATUS_STYLE[verdicts.process_cpu(mean, view.targets)])
                    summary.append(f" {fmt.human_bytes(sum(rss)) if rss else '—':>7}")
                    summary.append(f"  each {min(cpus):.0f}-{max(cpus):.0f}%", style="dim")
                out.append(Line(summary, 1))
                for w in workers:
                    out.append(Line(process_line(w, f" worker {w.pid}", view.targets), 6))
            else:
                out.append(Line(Text("no DataLoader workers (num_workers=0?)",
                                     style=fmt.STATUS_STYLE["near"]), 1))
            others = [p for p in tree.processes if p.role == "child"]
            if others:
                out.append(Line(Text(f"+{len(others)} other child processes", style="dim"), 7))
            tcpu = tree_cpu(tree)
            hist = [v for v in (tree_cpu(s) for s in recent(view.session.processes, view.now,
                                                              HISTORY_S)) if v is not None]
            out.append(Line(spark_line(
                label("tree") + Text(f"{fmt.pct(tcpu):<11}"), hist, width, lo=0, hi=None,
            ), 3))

        host = latest(view.session.host, view.now)
        if host is None:
            out.append(Line(Text("host: waiting…", style="dim"), 2))
            return out
        hosts = recent(view.session.host, view.now, HISTORY_S)
        out.append(Line(spark_line(
            label("cpu") + Text(f"{fmt.pct(host.cpu_percent):<11}"),
            values(hosts, lambda h: h.cpu_percent), width, lo=0, hi=100,
        ), 2))
        if host.per_core_percent:
            out.append(Line(cores_line(host.per_core_percent, width), 5))
        out.append(Line(spark_line(
            label("iowait") + Text(f"{fmt.pct(host.iowait_percent, digits=1):<11}",
                                   style=fmt.STATUS_STYLE[verdicts.iowait(host.iowait_percent,
                                                                          view.targets)]),
            values(hosts, lambda h: h.iowait_percent), width, lo=0, hi=None,
        ), 3))
        frac = (host.ram_used_bytes / host.ram_total_bytes
                if host.ram_used_bytes is not None and host.ram_total_bytes else None)
        ram = label("RAM")
        ram.append(f"{fmt.human_bytes(host.ram_used_bytes)}/"
                   f"{fmt.human_bytes(host.ram_total_bytes, precision=0)}",
                   style=fmt.STATUS_STYLE[verdicts.host_ram(frac, view.targets)])
        if host.swap_used_bytes:
            ram.append(f"  swap {fmt.human_bytes(host.swap_used_bytes)}",
                       style=fmt.STATUS_STYLE["near"])
        if host.load1 is not None:
            ram.append(f"  load {host.load1:.1f}", style="dim")
        out.append(Line(ram, 4))
        if host.per_core_percent and len(host.per_core_percent) > 1:
            out.append(Line(Text("per-core CPU", style="dim"), 15))
            out += core_chart(host.per_core_percent, width)
        return out
