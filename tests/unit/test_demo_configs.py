"""Every demo scenario the CLI offers has a configuration, and every fixed variant
is its base with what its fix changes: a scenario list and a configuration table
merged apart would otherwise fail only when a job starts."""

from __future__ import annotations

import dataclasses

from aitop.demo import FIXED_VARIANTS, SCENARIOS
from aitop.demo.config import CONFIGS


def test_every_scenario_has_a_configuration() -> None:
    assert [name for name in SCENARIOS if name not in CONFIGS] == []


def test_each_fixed_variant_changes_its_base() -> None:
    for base, fixed in FIXED_VARIANTS.items():
        assert base in CONFIGS and fixed in CONFIGS, (base, fixed)
        changed = [f.name for f in dataclasses.fields(CONFIGS[base])
                   if getattr(CONFIGS[base], f.name) != getattr(CONFIGS[fixed], f.name)]
        assert changed, f"{fixed} is {base} unchanged"
