"""Secret redaction for everything aitop shows, records or exports.

aitop reads other people's command lines and environments (``/proc/PID/cmdline``,
``/proc/PID/environ``) and puts them on screen and into snapshot files that get
pasted into tickets. Training jobs routinely carry credentials there (``HF_TOKEN``,
``WANDB_API_KEY``, ``--hub-token``, ``s3://`` or ``https://user:pass@`` URLs), so
every string the engine emits passes through one of these functions first.

The rules lean towards over-redaction: hiding a harmless value costs a little
context, leaking a token costs a rotated credential. The one deliberate exception
is ``TOKENIZER`` (``--tokenizer gpt2``, ``TOKENIZERS_PARALLELISM``) and token counts
(``--max-tokens``): they contain ``TOKEN`` but are model settings, never secrets,
and matter when diagnosing a data pipeline.

All functions are pure, never raise on odd input, and are idempotent
(``redact_text(redact_text(s)) == redact_text(s)``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

#: What a redacted value is replaced with.
REDACTED = "***"

#: Substrings that make a variable / option / key name sensitive (case-insensitive).
#: The brief's list plus a few that name credentials just as plainly.
SENSITIVE_WORDS: tuple[str, ...] = (
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
    "PRIVATE",
    "COOKIE",
)

# Words that contain a sensitive word but never name a secret; removed from a name
# before it is checked (so ``HF_TOKENIZER_TOKEN`` is still sensitive).
# Token *counts* (``--max-tokens``, ``MAX_NEW_TOKENS``) are hyperparameters, not secrets.
_BENIGN_WORDS = re.compile(
    r"TOKENI[SZ]ERS?|(?:MAX|MIN|NUM)[-_.]?(?:NEW[-_.]?)?TOKENS?(?![A-Za-z])", re.IGNORECASE
)

# Plus "PASS" (``DB_PASS``, ``PGPASSFILE``) but not ``PASSTHROUGH``, and ``*_PWD``
# (``MYSQL_PWD``) but not the shell's ``PWD`` / ``OLDPWD`` (the working directory).
_SENSITIVE_RE = re.compile(
    "|".join((*SENSITIVE_WORDS, r"PASS(?!THROUGH)", r"_PWD(?![A-Z])")), re.IGNORECASE
)

# A name as it appears in ``NAME=value``, ``--name value``, ``"name": "value"``.
_NAME_CHARS = r"[A-Za-z0-9_.\-]"

# scheme://userinfo@host -> scheme://***@host. The userinfo alone can be a token
# (``https://ghp_xxx@github.com``), so all of it goes, not just the password.
_URL_CREDS_RE = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/\s@'\"]+)@")

# Well-known self-identifying token formats, redacted wherever they appear.
_TOKEN_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"),  # GitHub
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}\b"),  # GitHub fine-grained
    re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"),  # Hugging Face
    re.compile(r"\bsk-[A-Za-z0-9_\-]{20,}\b"),  # OpenAI / Anthropic style
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key id
    re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}\b"),  # Slack
    re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}\b"),  # GitLab
    re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]+"),  # JWT
)

# ``Authorization: Bearer xyz`` / ``Bearer xyz`` / ``Basic xyz``.
_BEARER_RE = re.compile(
    r"\b(?P<kind>Bearer|Basic|Token)(?P<sep>\s+)(?P<value>[A-Za-z0-9._~+/=\-]{6,})"
)

# ``name=value``, ``name: value``, ``"name": "value"``, ``--name=value`` in free
# text, where ``name`` contains a sensitive word. The value runs to whitespace,
# a quote, a comma, ``;`` or ``&`` (query strings), or a closing bracket.
_ASSIGN_RE = re.compile(
    r"(?P<name>" + _NAME_CHARS + r"+)(?P<q1>['\"]?)(?P<sep>\s*[=:]\s*)(?P<q2>['\"]?)"
    r"(?P<value>[^\s'\",;&)}\]]+)"
)

# ``--name value`` in free text (only with leading dashes: plain prose such as
# "token 5 of 10" is left alone).
_OPTION_SPACE_RE = re.compile(
    r"(?P<name>(?<![A-Za-z0-9_])--?" + _NAME_CHARS + r"+)(?P<sep>[ \t]+)"
    r"(?P<value>(?!-)[^\s'\"]+)"
)


def is_sensitive_name(name: str) -> bool:
    """True when ``name`` (an env var, option or config key) looks like it holds a secret."""
    if not name:
        return False
    return _SENSITIVE_RE.search(_BENIGN_WORDS.sub("", name)) is not None


def _sub_assign(match: re.Match[str]) -> str:
    value = match.group("value")
    if not is_sensitive_name(match.group("name")) or value == REDACTED:
        return match.group(0)
    if value in ("Bearer", "Basic", "Token"):
        # "Authorization: Bearer ***": the scheme word is not the secret and the
        # value after it was already hidden by _BEARER_RE.
        return match.group(0)
    return (
        match.group("name") + match.group("q1") + match.group("sep") + match.group("q2") + REDACTED
    )


def _sub_option_space(match: re.Match[str]) -> str:
    if not is_sensitive_name(match.group("name")):
        return match.group(0)
    return match.group("name") + match.group("sep") + REDACTED


def redact_text(text: str) -> str:
    """Redact credentials anywhere inside a free-form string.

    Handles URL userinfo, ``Bearer``/``Basic`` values, well-known token formats
    (GitHub, Hugging Face, AWS key ids, JWTs, ...), ``name=value`` / ``name: value``
    pairs and ``--name value`` options whose name is sensitive. Used for log lines,
    error messages, single argv elements and environment values alike.
    """
    if not isinstance(text, str):
        text = str(text)
    if not text:
        return text
    out = _URL_CREDS_RE.sub(lambda m: m.group("scheme") + REDACTED + "@", text)
    out = _BEARER_RE.sub(lambda m: m.group("kind") + m.group("sep") + REDACTED, out)
    for pattern in _TOKEN_PATTERNS:
        out = pattern.sub(REDACTED, out)
    out = _ASSIGN_RE.sub(_sub_assign, out)
    out = _OPTION_SPACE_RE.sub(_sub_option_space, out)
    return out


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Return a copy of ``env`` with secret values replaced by ``***``.

    A value is hidden entirely when its *name* is sensitive (``HF_TOKEN``,
    ``AWS_SECRET_ACCESS_KEY``, ``PGPASSWORD``...). Every other value still goes
    through :func:`redact_text`, because ``DATABASE_URL``, ``HTTPS_PROXY`` or
    ``PIP_INDEX_URL`` carry credentials inside URLs under innocent names.
    """
    out: dict[str, str] = {}
    for name, value in env.items():
        key = str(name)
        out[key] = REDACTED if is_sensitive_name(key) else redact_text(str(value))
    return out


def _looks_like_option(arg: str) -> bool:
    """An argv element that starts a new option (so it is not a flag's value)."""
    if len(arg) < 2 or not arg.startswith("-"):
        return False
    # "-1", "-0.5" are values, not options.
    return not re.fullmatch(r"-\d[\d.eE+\-]*", arg)


def command_line(argv: Iterable[str], max_chars: int) -> str:
    """A command line as one short line: redacted, runs of whitespace (a ``python -c``
    program's newlines) made one space, and cut to ``max_chars`` with "…" where cut.
    Every place that names a process by its command (messages, neighbours, the
    exporter's labels) says it this way, so none shows a secret another hides."""
    text = " ".join(" ".join(redact_argv(argv)).split())
    return text if len(text) <= max_chars else text[:max_chars - 1] + "…"


def redact_argv(argv: Iterable[str]) -> list[str]:
    """Return a copy of a command line with secret arguments replaced by ``***``.

    Covers ``--token=abc``, ``--api-key abc`` (the next element is hidden unless it
    is itself an option), ``API_KEY=abc`` / ``wandb.api_key=abc`` style overrides,
    URLs with ``user:pass@`` and anything :func:`redact_text` finds inside an
    element (e.g. a ``python -c`` program). Short options such as ``-p`` are not
    treated as secret flags: single letters are too ambiguous (``-p`` is a port
    as often as a password) and hiding every value after them would blank most
    command lines.
    """
    args = [str(a) for a in argv]
    out: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next:
            hide_next = False
            if not _looks_like_option(arg):
                out.append(REDACTED)
                continue
        if _looks_like_option(arg) and len(arg.partition("=")[0].lstrip("-")) > 1:
            # "--token=abc", "--api-key abc", Go-style "-password abc"; a single
            # letter ("-p") is deliberately not a secret flag (see above).
            name, eq, _value = arg.partition("=")
            if is_sensitive_name(name.lstrip("-")):
                if eq:
                    out.append(name + "=" + REDACTED)
                else:
                    out.append(arg)
                    hide_next = True
                continue
        elif not arg.startswith("-") and "=" in arg:
            name, _eq, _value = arg.partition("=")
            # KEY=value / hydra "+db.password=x": name is the part before '='.
            if re.fullmatch(r"[+~]{0,2}" + _NAME_CHARS + r"+", name) and is_sensitive_name(name):
                out.append(name + "=" + REDACTED)
                continue
        out.append(redact_text(arg))
    return out
