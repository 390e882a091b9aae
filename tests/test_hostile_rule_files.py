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
from aitop.knowledge.catalogue import CATALOGUE
from aitop.knowledge.expressions import (
    MAX_EXPR_CHARS,
    MAX_EXPR_DEPTH,
    MAX_FORMAT_WIDTH,
    Condition,
    ExpressionError,
    check_template,
    names_in,
    render,
)
from aitop.knowledge.yamlio import (
    MAX_ALIASES,
    MAX_DEPTH,
    MAX_FILE_BYTES,
    KnowledgeError,
    load_yaml_file,
    load_yaml_text,
)

#: Address space the CLI may use: imports need ~0.3 GB; the bombs needed 3 GB.
MEMORY_LIMIT_BYTES = 1536 * 1024 * 1024
#: Wall time one refused file may take (it takes well under a second).
TIME_LIMIT_S = 20.0

RULE_HEAD = (
    "rules:\n"
    "  - name: hostile\n"
    "    severity: low\n"
    "    category: data_loading\n"
)


def _limit_memory() -> None:
    """In the child, before exec: cap the address space so a blow-up is a MemoryError."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def run_aitop_limited(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """``demo_jobs.run_aitop`` with the address space capped (it has no such option)."""
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


def _write(tmp_path: Path, content: str | bytes) -> Path:
    path = tmp_path / "my.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


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


def _rule(**fields: str) -> str:
    """A valid rule with ``fields`` replaced, as YAML text."""
    base = {
        "expr": "phase_data_wait > 0.5",
        "title": "t",
        "source": "{document: diagnose}",
        **fields,
    }
    return RULE_HEAD + "".join(f"    {key}: {value}\n" for key, value in base.items())


# ------------------------------------------------------------- the CLI, end to end


def test_a_non_utf8_byte(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    text = _rule(title="caf\udce9 au lait")
    data = text.encode("utf-8", "surrogateescape")  # a lone 0xe9 byte: Latin-1, not UTF-8
    path = _write(tmp_path, data)
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
    text = _rule(**{field: value})
    assert_refused(target, _write(tmp_path, text), _line_of(text, f"{field}:"), message)


def test_removable_that_is_not_a_number(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    text = _rule(gain="{method: amdahl, metric: phase_data_wait, removable: [a, b]}")
    path = _write(tmp_path, text)
    assert_refused(target, path, _line_of(text, "gain:"), "'removable' must be a fraction")


def test_an_expression_of_50000_terms(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    expr = " + ".join(["phase_data_wait"] * 50_000) + " > 1"
    path = _write(tmp_path, _rule(expr=expr))
    assert_refused(target, path, 5, f"condition is {len(expr):,} characters long",
                   f"over the limit of {MAX_EXPR_CHARS:,}")


def test_an_expression_of_100000_nots(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    path = _write(tmp_path, _rule(expr="not " * 100_000 + "has_gpu"))
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
    text = _rule(expr=expr)
    assert_refused(target, _write(tmp_path, text), _line_of(text, "expr:"), message)


def _alias_bomb(levels: int = 9, width: int = 10) -> str:
    """Billion laughs inside ``source:``: each level lists the previous one ``width`` times."""
    lines = [f"        - &l0 [{', '.join(['lol'] * width)}]"]
    lines += [
        f"        - &l{n} [{', '.join([f'*l{n - 1}'] * width)}]" for n in range(1, levels)
    ]
    return _rule(source="") + "      document: diagnose\n      section:\n" + "\n".join(lines) + "\n"


def test_a_yaml_alias_bomb(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    text = _alias_bomb()
    path = _write(tmp_path, text)
    # Level 5 (10^5 copies of 'lol') is the first to expand past the cap.
    assert_refused(target, path, _line_of(text, "&l5 "), "aliases here expand to more than",
                   "alias bomb")


def test_many_aliases(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    text = "x: &x 1\n" + "".join(f"k{n}: *x\n" for n in range(MAX_ALIASES + 5)) + "rules: []\n"
    path = _write(tmp_path, text)
    assert_refused(target, path, _line_of(text, f"k{MAX_ALIASES}:"),
                   f"more than {MAX_ALIASES} aliases")


def test_a_recursive_alias(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    text = _rule(source="&s {document: *s}")
    path = _write(tmp_path, text)
    assert_refused(target, path, _line_of(text, "source:"),
                   "refers to the mapping or list it is in")


def test_deep_nesting(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    text = _rule(evidence="[" * 400 + "]" * 400)
    path = _write(tmp_path, text)
    assert_refused(target, path, _line_of(text, "evidence:"), f"nested more than {MAX_DEPTH}")


def test_a_huge_width_in_a_title_template(
    tmp_path: Path, target: subprocess.Popen[bytes]
) -> None:
    text = _rule(title='"{phase_samples:>300000000}"')
    assert_refused(target, _write(tmp_path, text), _line_of(text, "title:"),
                   "format width 300000000",
                   f"over the limit of {MAX_FORMAT_WIDTH}")


def test_a_huge_precision_in_an_action_template(
    tmp_path: Path, target: subprocess.Popen[bytes]
) -> None:
    text = _rule(actions='["now {phase_data_wait:.999999999f}"]')
    assert_refused(target, _write(tmp_path, text), _line_of(text, "actions:"), "format precision")


def test_a_file_over_the_size_cap(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    text = _rule() + "# " + "x" * MAX_FILE_BYTES + "\n"
    path = _write(tmp_path, text)
    assert_refused(target, path, None, "larger than 1 MiB")


def test_a_number_too_long_to_convert(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    text = _rule(**{"for": "9" * 5000})
    path = _write(tmp_path, text)
    assert_refused(target, path, _line_of(text, "for:"), "cannot read this value")


def test_a_control_character(tmp_path: Path, target: subprocess.Popen[bytes]) -> None:
    text = _rule(title="a\x1b[2Jb")
    path = _write(tmp_path, text)
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
    assert_refused(target, _write(tmp_path, text), line, message)


# ------------------------------------------------------------- each cap, in place


def test_an_alias_bomb_is_measured_not_built() -> None:
    started = time.monotonic()
    with pytest.raises(KnowledgeError, match="alias bomb") as info:
        load_yaml_text(_alias_bomb(levels=30), "bomb.yaml")
    assert time.monotonic() - started < 2.0
    assert info.value.file == "bomb.yaml" and info.value.line is not None


def test_a_few_aliases_still_work() -> None:
    doc = load_yaml_text("src: &s {document: diagnose}\nrules: [{source: *s}, {source: *s}]\n",
                         "f")
    assert doc["rules"][0]["source"] == {"document": "diagnose"}
    merged = load_yaml_text("a: &a {x: 1}\nb: {<<: *a, y: 2}\n", "f")
    assert merged["b"] == {"x": 1, "y": 2}


def test_nesting_just_under_the_cap_loads() -> None:
    lists = MAX_DEPTH - 1  # inside the document's mapping, the first level
    assert load_yaml_text("a: " + "[" * lists + "]" * lists + "\n", "f") is not None
    with pytest.raises(KnowledgeError, match="nested more than") as info:
        load_yaml_text("a: " + "[" * (lists + 1) + "]" * (lists + 1) + "\n", "f")
    assert info.value.line == 1


def test_the_size_cap_reads_no_more_than_it_allows(tmp_path: Path) -> None:
    path = _write(tmp_path, b"a: 1\n" + b" " * MAX_FILE_BYTES)
    with pytest.raises(KnowledgeError, match="larger than 1 MiB") as info:
        load_yaml_file(path)
    assert info.value.file == str(path)
    assert load_yaml_file(_write(tmp_path, b"a: 1\n" + b"#" * (MAX_FILE_BYTES - 6) + b"\n"))


def test_non_utf8_reports_line_and_column(tmp_path: Path) -> None:
    path = _write(tmp_path, b"a: 1\nb: x\xff\n")
    with pytest.raises(KnowledgeError, match=r"byte 0xff at column 5") as info:
        load_yaml_file(path)
    assert info.value.line == 2


def test_a_control_character_after_multibyte_text_is_at_its_line() -> None:
    text = "# " + "é" * 50 + "\n" * 3 + "a: \x01\n"
    with pytest.raises(KnowledgeError, match="#x0001") as info:
        load_yaml_text(text, "f")
    assert info.value.line == 4


def test_messages_are_one_printable_line() -> None:
    error = KnowledgeError("first\nsecond\x1b[31m" + "x" * 5000, "f", 3)
    text = str(error)
    assert "\n" not in text and "\x1b" not in text and "\\x1b" in text
    assert len(text) < 600


def test_expression_length_is_checked_before_parsing() -> None:
    with pytest.raises(ExpressionError, match="characters long"):
        names_in("x + " * MAX_EXPR_CHARS)


def test_expression_depth_is_capped() -> None:
    assert names_in(" + ".join(["phase_data_wait"] * 10)) == {"phase_data_wait"}
    with pytest.raises(ExpressionError, match=f"over the limit of {MAX_EXPR_DEPTH}"):
        names_in(" + ".join(["phase_data_wait"] * (MAX_EXPR_DEPTH + 1)))
    with pytest.raises(ExpressionError, match="nested"):
        names_in("not " * 200 + "has_gpu")
    with pytest.raises(ExpressionError):
        names_in("-" * (MAX_EXPR_CHARS - 1) + "1")


def test_powers_are_bounded_in_time() -> None:
    started = time.monotonic()
    condition = Condition("phase_samples ** 3999999 > 1", CATALOGUE)
    with pytest.raises(ExpressionError, match="cannot evaluate"):
        condition.evaluate({"phase_samples": 3999999.0})
    with pytest.raises(ExpressionError, match="cannot evaluate"):
        Condition("3999999 ** 3999999 > 1", CATALOGUE).evaluate({})
    assert time.monotonic() - started < 2.0
    assert Condition("phase_samples ** 2 >= 4", CATALOGUE).evaluate({"phase_samples": 2.0})


def test_modulo_still_works_on_numbers() -> None:
    assert Condition("phase_samples % 2 == 1", CATALOGUE).evaluate({"phase_samples": 7.0})


@pytest.mark.parametrize("spec", [">300000000", ".101f", "0101", "x^1000", ">" + "9" * 5000])
def test_template_widths_are_refused_at_load(spec: str) -> None:
    with pytest.raises(ExpressionError, match="over the limit"):
        check_template("{phase_samples:" + spec + "}")


def test_template_widths_are_clamped_when_rendered() -> None:
    assert len(render("{x:>300000000}", {"x": 1.0})) == MAX_FORMAT_WIDTH
    assert render("{x:.999999999f}", {"x": 1.0}) == format(1.0, f".{MAX_FORMAT_WIDTH}f")
    assert render("{x:>{y}}", {"x": 1.0}) == "1.0"  # nested specs: the plain value, as before
    assert render("{x:.0%} {x:>8.2f}", {"x": 0.5}) == "50%     0.50"
