"""Hostile ``--rules`` files: one located error line, in bounded time and memory.

A rule file is the user's (or whoever wrote it), so every malformed one must end
the real CLI with exit status 2 and a single ``bad rule file: FILE:LINE: ...``
line: never a traceback, never a minute of CPU or gigabytes of memory, and never
harm to the process aitop was asked to attach to. The CLI runs in a subprocess
whose address space is capped (RLIMIT_AS), so a blow-up fails the test with a
MemoryError instead of taking the machine down. The unit tests at the end pin
each cap where it is enforced.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aitop.knowledge.base.expressions import (
    MAX_EXPR_CHARS,
    MAX_FORMAT_WIDTH,
)
from aitop.knowledge.reading.yamlio import (
    MAX_ALIASES,
    MAX_DEPTH,
    MAX_FILE_BYTES,
)
from support.rule_files import alias_bomb, rule_text, write_rule_file

#: Address space the CLI may use: imports need ~0.3 GB; the bombs needed 3 GB.
MEMORY_LIMIT_BYTES = 1536 * 1024 * 1024
#: Wall time one refused file may take (it takes well under a second).
TIME_LIMIT_S = 20.0

def _limit_memory() -> None:
    """In the child, before exec: cap the address space so a blow-up is a MemoryError."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def run_aitop_limited(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """``support.jobs.run_aitop`` with the address space capped (it has no such option)."""
    return subprocess.run(
        [sys.executable, "-m", "aitop.tui", *args],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        preexec_fn=_limit_memory,
    )


@pytest.fixture
def target() -> Iterator[subprocess.Popen[bytes]]:
    """A running process to attach to, which a bad rule file must leave running."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def assert_refused(
    target: subprocess.Popen[bytes], path: Path, line: int | None, *needles: str
) -> str:
    """Run the CLI on ``path``; assert one located error line, in time, target untouched."""
    started = time.monotonic()
    result = run_aitop_limited("--pid", str(target.pid), "--headless", "--rules", str(path))
    took = time.monotonic() - started
    assert took < TIME_LIMIT_S, f"took {took:.1f} s"
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr and "MemoryError" not in result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line, got: {result.stderr[:2000]!r}"
    where = f"{path}:{line}: " if line is not None else f"{path}: "
    assert f"bad rule file: {where}" in lines[0], lines[0]
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    assert len(lines[0]) < 1000
    assert target.poll() is None, "the target process must keep running"
    return lines[0]


# ------------------------------------------------------------- the CLI, end to end


def test_a_non_utf8_byte(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    text = rule_text(title="caf\udce9 au lait")
    data = text.encode("utf-8", "surrogateescape")  # a lone 0xe9 byte: Latin-1, not UTF-8
    path = write_rule_file(tmp_path, data)
    assert_refused(target, path, _line_of(text, "title:"), "not UTF-8", "0xe9")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("why", "[a]", "'why' must be text, not a list"),
        ("title", "[a, b]", "'title' must be text, not a list"),
        ("title", "{a: 1}", "'title' must be text, not a mapping"),
        ("title", "12", "'title' must be text, not int 12"),
        ("snippet", "[pip install x]", "'snippet' must be text, not a list"),
        ("snippet", "{code: x}", "'snippet' must be text, not a mapping"),
    ],
)
def test_a_text_field_of_the_wrong_type(
    tmp_path: Path, target: subprocess.Popen[bytes], field: str, value: str, message: str
) -> None:
    text = rule_text(**{field: value})
    assert_refused(target, write_rule_file(tmp_path, text), _line_of(text, f"{field}:"), message)


def test_removable_that_is_not_a_number(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    text = rule_text(gain="{method: amdahl, metric: phase_data_wait, removable: [a, b]}")
    path = write_rule_file(tmp_path, text)
    assert_refused(target, path, _line_of(text, "gain:"), "'removable' must be a fraction")


def test_an_expression_of_50000_terms(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    expr = " + ".join(["phase_data_wait"] * 50_000) + " > 1"
    path = write_rule_file(tmp_path, rule_text(expr=expr))
    assert_refused(target, path, 5, f"condition is {len(expr):,} characters long",
                   f"over the limit of {MAX_EXPR_CHARS:,}")


def test_an_expression_of_100000_nots(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    path = write_rule_file(tmp_path, rule_text(expr="not " * 100_000 + "has_gpu"))
    assert_refused(target, path, 5, "condition is 400,007 characters long")


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("'f\"{phase_samples:>300000000}\" != \"\"'", "only metric names, numbers and operators"),
        ("\"'%0300000000d' % phase_samples != ''\"", "text formatting (%) is not allowed"),
    ],
)
def test_a_format_spec_inside_an_expression(
    tmp_path: Path, target: subprocess.Popen[bytes], expr: str, message: str
) -> None:
    text = rule_text(expr=expr)
    assert_refused(target, write_rule_file(tmp_path, text), _line_of(text, "expr:"), message)


def test_a_yaml_alias_bomb(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    text = alias_bomb()
    path = write_rule_file(tmp_path, text)
    # Level 5 (10^5 copies of 'lol') is the first to expand past the cap.
    assert_refused(target, path, _line_of(text, "&l5 "), "aliases here expand to more than",
                   "alias bomb")


def test_many_aliases(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    text = "x: &x 1\n" + "".join(f"k{n}: *x\n" for n in range(MAX_ALIASES + 5)) + "rules: []\n"
    path = write_rule_file(tmp_path, text)
    assert_refused(target, path, _line_of(text, f"k{MAX_ALIASES}:"),
                   f"more than {MAX_ALIASES} aliases")


def test_a_recursive_alias(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    text = rule_text(source="&s {document: *s}")
    path = write_rule_file(tmp_path, text)
    assert_refused(target, path, _line_of(text, "source:"),
                   "refers to the mapping or list it is in")


def test_deep_nesting(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    text = rule_text(evidence="[" * 400 + "]" * 400)
    path = write_rule_file(tmp_path, text)
    assert_refused(target, path, _line_of(text, "evidence:"), f"nested more than {MAX_DEPTH}")


def test_a_huge_width_in_a_title_template(
    tmp_path: Path, target: subprocess.Popen[bytes]
) -> None:
    text = rule_text(title='"{phase_samples:>300000000}"')
    assert_refused(target, write_rule_file(tmp_path, text), _line_of(text, "title:"),
                   "format width 300000000",
                   f"over the limit of {MAX_FORMAT_WIDTH}")


def test_a_huge_precision_in_an_action_template(
    tmp_path: Path, target: subprocess.Popen[bytes]
) -> None:
    text = rule_text(actions='["now {phase_data_wait:.999999999f}"]')
    assert_refused(target, write_rule_file(tmp_path, text), _line_of(text, "actions:"),
                   "format precision")


def test_a_file_over_the_size_cap(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    text = rule_text() + "# " + "x" * MAX_FILE_BYTES + "\n"
    path = write_rule_file(tmp_path, text)
    assert_refused(target, path, None, "larger than 1 MiB")


def test_a_number_too_long_to_convert(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    text = rule_text(**{"for": "9" * 5000})
    path = write_rule_file(tmp_path, text)
    assert_refused(target, path, _line_of(text, "for:"), "cannot read this value")


def test_a_control_character(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    text = rule_text(title="a\x1b[2Jb")
    path = write_rule_file(tmp_path, text)
    assert_refused(target, path, _line_of(text, "title:"), "#x001b")


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("rules: 5\n", 1, "'rules' must be a list of mappings"),
        ("rules:\n  - just a name\n", 2, "each item of 'rules' must be a mapping"),
        ("phases: 5\n", 1, "'phases' must be a list of mappings"),
        ("phases:\n  - forward\n", 2, "each item of 'phases' must be a mapping"),
        ("phases: []\nstep_counters: abc\n", 2, "'step_counters' must be a list of names"),
    ],
)
def test_a_section_of_the_wrong_shape(
    tmp_path: Path, target: subprocess.Popen[bytes], text: str, line: int, message: str
) -> None:
    assert_refused(target, write_rule_file(tmp_path, text), line, message)


# ------------------------------------------------------------- each cap, in place


























