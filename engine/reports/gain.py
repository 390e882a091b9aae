"""A finding's estimated gain in words, the same in every place that shows one.

A prediction for this machine, an Amdahl ceiling and the documents' typical
figure are different promises; the headless text report, the Markdown report,
the UI's finding list and its detail screen all word them here, so none can
call a ceiling a prediction while another says it right.
"""

from __future__ import annotations

from aitop.knowledge.base.findings import Gain
from aitop.knowledge.judging.gains import figure, figure_range

#: The finding list's one-character mark per method: a prediction has none, a
#: ceiling is an upper bound, a documents' figure is approximate.
BRIEF_MARK: dict[str, str] = {"predicted": "", "amdahl": "≤", "document": "~"}
#: What the brief form shows where there is no speed-up figure.
NO_FIGURE_BRIEF = "  ·  "


def gain_text(gain: Gain, *, brief: bool = False) -> str:
    """What the first action buys, saying which kind of figure it is.

    In full: ``predicted ×1.4–1.5 (ceiling ×21)``, ``at most ×2.8 (Amdahl
    ceiling)`` (with its low end where that is under x1: the change may slow the
    job), ``documents: ×1.4 (1.3–1.5)``, or what the gain is instead of
    speed; every figure to two significant figures (``gains.figure``). ``brief``
    (the finding list's 6-column badge): ``×1.4``, ``≤×2.8``, ``~×1.4``; the
    range and the ceiling are in the detail.
    """
    g = gain
    if g.speedup is None:
        if brief:
            return NO_FIGURE_BRIEF
        if g.method == "predicted":
            return "no prediction yet"
        if g.method == "none":
            return f"no figure: {g.explanation}" if g.explanation else "no figure"
        return f"no figure ({g.method})"
    if brief:
        return f"{BRIEF_MARK.get(g.method, '~')}×{figure(g.speedup)}"
    if g.method == "predicted" and g.low is not None and g.high is not None:
        text = f"predicted ×{figure_range(g.low, g.high)}"
        return text + (f" (ceiling ×{figure(g.ceiling)})" if g.ceiling else "")
    if g.method == "amdahl":
        text = f"at most ×{figure(g.speedup)} (Amdahl ceiling)"
        if g.low is not None and g.low < 1.0:
            # A ceiling whose other end slows the job (``gains._worker_core``).
            text += f", ×{figure(g.low)} where its compute scales over threads"
        return text
    text = f"×{figure(g.speedup)}"
    if g.low is not None and g.high is not None:
        text += f" ({figure_range(g.low, g.high)})"
    return f"documents: {text}" if g.method == "document" else text
