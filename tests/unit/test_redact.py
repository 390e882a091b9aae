"""Secret redaction: unit cases plus the argv/env of a real child read from /proc."""

from __future__ import annotations

import pytest
from aitop.probes.redact import (
    REDACTED,
    command_line,
    is_sensitive_name,
    redact_argv,
    redact_env,
    redact_text,
)

# ------------------------------------------------------------------ names


@pytest.mark.parametrize(
    "name",
    [
        "API_KEY",
        "api_key",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "WANDB_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "PGPASSWORD",
        "MYSQL_PWD",
        "DB_PASS",
        "LDAP_PASSWD",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "NPM_AUTH",
        "Authorization",
        "private_key",
        "HF_TOKENIZER_TOKEN",
    ],
)
def test_sensitive_names(name: str) -> None:
    assert is_sensitive_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "PATH",
        "PWD",
        "OLDPWD",
        "HOME",
        "CUDA_VISIBLE_DEVICES",
        "NCCL_DEBUG",
        "OMP_NUM_THREADS",
        "TOKENIZERS_PARALLELISM",
        "tokenizer",
        "max-tokens",
        "MAX_NEW_TOKENS",
        "NCCL_P2P_PASSTHROUGH",
        "",
    ],
)
def test_harmless_names(name: str) -> None:
    assert not is_sensitive_name(name)


# ------------------------------------------------------------------- argv


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--token=abc"], ["--token=***"]),
        (["--api-key", "abc", "--lr", "0.1"], ["--api-key", "***", "--lr", "0.1"]),
        (["--password=x"], ["--password=***"]),
        (["--hub_token", "hf_x"], ["--hub_token", "***"]),
        (["-password", "zz"], ["-password", "***"]),
        # a boolean flag followed by another option hides nothing
        (["--use_auth_token", "--out", "/ckpt"], ["--use_auth_token", "--out", "/ckpt"]),
        # a trailing flag with no value
        (["--token"], ["--token"]),
        # negative numbers are values, not options
        (["--secret", "-1"], ["--secret", "***"]),
        # single-letter options are not treated as secret flags
        (["-p", "8080"], ["-p", "8080"]),
        (["API_KEY=abc", "lr=0.1"], ["API_KEY=***", "lr=0.1"]),
        (
            ["+wandb.api_key=abc", "trainer.max_tokens=5"],
            ["+wandb.api_key=***", "trainer.max_tokens=5"],
        ),
        (["--tokenizer", "gpt2"], ["--tokenizer", "gpt2"]),
        (["--data", "https://user:pw@host/data"], ["--data", "https://***@host/data"]),
        (["s3://AKIAABCDEFGHIJKLMNOP:x@bucket/k"], ["s3://***@bucket/k"]),
        (["train.py", "--epochs", "3"], ["train.py", "--epochs", "3"]),
    ],
)
def test_redact_argv(argv: list[str], expected: list[str]) -> None:
    assert redact_argv(argv) == expected


def test_redact_argv_inside_python_c_program() -> None:
    out = redact_argv(["python", "-c", "login(token='abcdef123'); run(password=hunter2)"])
    assert "abcdef123" not in " ".join(out) and "hunter2" not in " ".join(out)
    assert out[:2] == ["python", "-c"]


def test_redact_argv_accepts_any_iterable_and_does_not_mutate() -> None:
    argv = ["--token=abc"]
    assert redact_argv(iter(argv)) == ["--token=***"]
    assert argv == ["--token=abc"]


# -------------------------------------------------------------------- env


def test_redact_env() -> None:
    env = {
        "HF_TOKEN": "hf_x",
        "aws_secret_access_key": "s",
        "PATH": "/usr/bin",
        "PWD": "/work",
        "HTTPS_PROXY": "http://u:p4ss@proxy:3128",
        "TOKENIZERS_PARALLELISM": "false",
        "SOME_URL": "https://x.org/?sig=1&token=zzz",
        "EMPTY": "",
    }
    out = redact_env(env)
    assert out == {
        "HF_TOKEN": REDACTED,
        "aws_secret_access_key": REDACTED,
        "PATH": "/usr/bin",
        "PWD": "/work",
        "HTTPS_PROXY": "http://***@proxy:3128",
        "TOKENIZERS_PARALLELISM": "false",
        "SOME_URL": "https://x.org/?sig=1&token=***",
        "EMPTY": "",
    }
    assert env["HF_TOKEN"] == "hf_x"  # input untouched


# ------------------------------------------------------------------- text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Authorization: Bearer abcdef.ghijk-123", "abcdef.ghijk-123"),
        ("curl -H 'X-Api-Key: q1w2e3r4'", "q1w2e3r4"),
        ('{"api_key": "k-123", "lr": 0.1}', "k-123"),
        ("token=abc123&page=2", "abc123"),
        ("git clone https://ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa@github.com/x", "ghp_aaaa"),
        ("push with hf_abcdefghijklmnopqrstuvwxyz", "hf_abcdefghijklmnopqrstuvwxyz"),
        ("key id AKIAABCDEFGHIJKLMNOP used", "AKIAABCDEFGHIJKLMNOP"),
        ("run --hub-token T0KEN-VALUE now", "T0KEN-VALUE"),
        ("postgres://me:pa55@db/x", "pa55"),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abc_DEF-123", "eyJzdWIi"),
    ],
)
def test_redact_text_hides(text: str, secret: str) -> None:
    out = redact_text(text)
    assert secret not in out
    assert REDACTED in out
    assert redact_text(out) == out  # idempotent


@pytest.mark.parametrize(
    "text",
    [
        "epoch 3 step 100 loss 0.25",
        "token 5 of 10",
        "/data/shards/train-00001.tar",
        "https://pytorch.org/docs/stable/data.html",
        "--tokenizer gpt2 --max-tokens 4096",
        "",
    ],
)
def test_redact_text_leaves_harmless_text(text: str) -> None:
    assert redact_text(text) == text


# ------------------------------------------- a real child through the probes






def test_a_command_line_is_one_redacted_line_cut_where_it_is_long() -> None:
    argv = ["python", "-c", "import os\nprint(1)", "--hub-token", "hf_abcdefghijklmnop", "x" * 80]
    line = command_line(argv, 60)
    assert "hf_abc" not in line and "\n" not in line
    assert line.startswith("python -c import os print(1) --hub-token *** xx")
    assert len(line) == 60 and line.endswith("…")
    assert command_line(["python", "train.py"], 40) == "python train.py"
