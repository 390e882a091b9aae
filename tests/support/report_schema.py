"""The shipped JSON Schema of ``aitop.report/2``, as a real validator sees it."""

from __future__ import annotations

import functools
import json
from typing import Any

import jsonschema
from aitop.engine.reports import schema


def shipped_schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(schema.SCHEMA_FILE.read_text(encoding="utf-8"))
    return data


@functools.cache
def validator() -> jsonschema.protocols.Validator:
    meta = jsonschema.Draft202012Validator
    meta.check_schema(shipped_schema())
    return meta(shipped_schema())


def errors_of(doc: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator().iter_errors(doc)]
