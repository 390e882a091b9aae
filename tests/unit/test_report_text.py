"""The headless text report: what each line claims."""

from __future__ import annotations

from typing import Any

import pytest
from aitop.engine.reports.report import gain_label


@pytest.mark.parametrize(("finding", "label"), [
    ({"est_speedup": 1.9, "est_speedup_range": [1.69, 2.18], "gain_method": "predicted"},
     "predicted 1.69-2.18x"),
    ({"est_speedup": 8.9, "est_speedup_range": [8.9, 8.9], "gain_method": "amdahl"},
     "at most 8.90x"),
    ({"est_speedup": 1.4, "est_speedup_range": [1.3, 1.5], "gain_method": "document"},
     "documents: 1.40x"),
    ({"est_speedup": None, "est_speedup_range": None, "gain_method": "none"}, "gain: n/a"),
])
def test_the_text_report_says_which_kind_of_gain(finding: dict[str, Any], label: str) -> None:
    """A prediction is not a ceiling: the headless text never says "up to" for one."""
    assert gain_label(finding) == label
