"""Redaction knows today's token shapes, spares digests, and covers every place strings land."""

import base64
import json
import textwrap
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from bench_assets.cli import main
from bench_assets.sandbox.redact import REDACTED, Redactor
from tests.conftest import write_yaml
from tests.test_dagster_cells import replay_bench

FAKE = Path(__file__).resolve().parent / "fake_claude" / "claude"

# Built from pieces so no complete token sits in this file for scanners to trip over.
SHAPES = {
    "anthropic": "sk-ant-" + "api03-" + "Ab1" * 30 + "-xyzAA",
    "openai_project": "sk-" + "proj-" + "Q" * 20 + "T3BlbkFJ" + "z" * 20,
    "github_classic": "gh" + "p_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "github_fine_grained": "github" + "_pat_11ABCDEFG0" + "x" * 72,
    "gitlab": "glp" + "at-" + "xY7" * 7,
    "slack_bot": "xo" + "xb-1234567890-1234567890123-" + "a" * 24,
    "slack_webhook": "https://hooks.slack.com/services/" + "T0ABCDEFG/B0ABCDEFG/" + "x1" * 12,
    "aws_access_key": "AK" + "IAIOSFODNN7EXAMPLE",
    "stripe_live": "sk" + "_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "npm": "np" + "m_" + "aB3" * 12,
    "huggingface": "h" + "f_" + "kLm9" * 8 + "Zq",
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    + ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
    + ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "google_api": "AI" + "za" + "SyD" * 11 + "Xy",
    "sendgrid": "S" + "G." + "a" * 22 + "." + "b" * 43,
    "pypi": "pypi-" + "AgEIcHlwaS5vcmc" + "C" * 70,
    "basic_auth_url": "https://deploy:" + "s3cr3t-Passw0rd" + "@git.example.com/repo.git",
    "private_key": "-----BEGIN OPENSSH " + "PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
    "-----END OPENSSH PRIVATE KEY-----",
}
SECRET_PART = {"basic_auth_url": "s3cr3t-Passw0rd", "private_key": "b3BlbnNzaC1rZXktdjEAAAAA"}
KEEP = [
    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",  # sha256
    "sha256:" + "ab" * 32,
    "da39a3ee5e6b4b0d3255bfef95601890afd80709",  # git commit
    "930b0576-af2e-4ee9-8183-47b79eedb8b8",  # session id
    "20261130T134147279436Z-edc489",  # record id
    "claude-sonnet-4-5-20250929",
    "The APACHE license allows use; call add(a, b) and return a + b.",
    "comparator_cells[alpha|workflow.r0] 127.0.0.1:8080",
]


def _secret(name: str) -> str:
    return SECRET_PART.get(name, SHAPES[name])


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_every_common_token_shape_is_redacted(name: str) -> None:
    out = Redactor().text(f"before {SHAPES[name]} after")
    assert _secret(name) not in out
    assert REDACTED in out
    assert out.startswith("before ") and out.endswith(" after")


@pytest.mark.parametrize("value", KEEP)
def test_digests_ids_and_prose_are_left_alone(value: str) -> None:
    assert Redactor().text(value) == value


def test_known_values_and_nested_documents() -> None:
    r = Redactor(["plain-secret-value-42"])
    doc = {"a": ["x plain-secret-value-42 y", {"b": SHAPES["npm"]}], "n": 3}
    assert r.deep(doc) == {"a": [f"x {REDACTED} y", {"b": REDACTED}], "n": 3}


def test_no_stored_string_keeps_a_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Records, transcripts, patches, verify tails, details, metadata, event logs, reports, CLI.

    One generation where the baseline (a command agent) prints every token shape, writes them
    into the worktree and into a failing visible test, and the candidate arm (Claude Code) ends
    with an API error whose message carries them; then every byte the harness stored is read.
    """
    tokens = list(SHAPES.values())
    packed = base64.b64encode(json.dumps(tokens).encode()).decode()
    agent = textwrap.dedent(
        f"""\
        import base64, json
        tokens = json.loads(base64.b64decode({packed!r}))
        print("found:", " ".join(tokens))
        open("leak.txt", "w").write("\\n".join(tokens) + "\\n")
        open("tests/test_leak.py", "w").write(
            "def test_leak():\\n    assert False, " + repr(" ".join(tokens)) + "\\n")
        """
    )
    root = replay_bench(tmp_path)
    data = yaml.safe_load((root / "bench.yaml").read_text())
    data["arms"]["baseline"]["agent"] = {"adapter": "command", "argv": ["python", "-c", agent]}
    data["arms"]["cand"]["agent"] = {
        "adapter": "claude-code",
        "executable": str(FAKE),
        "env": ["ANTHROPIC_API_KEY", "FAKE_CLAUDE_MODE", "FAKE_CLAUDE_LEAK"],
    }
    data["agents"] = {"claude_code": {"version": "9.9.9"}}  # what the fake CLI answers
    write_yaml(root / "bench.yaml", data)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-harness-test-key-000000000000")
    monkeypatch.setenv("FAKE_CLAUDE_MODE", "leak")
    monkeypatch.setenv("FAKE_CLAUDE_LEAK", packed)
    art = tmp_path / "art"
    monkeypatch.setenv("WFBENCH_ARTIFACTS", str(art))
    runner = CliRunner()
    evolve = runner.invoke(main, ["evolve", "--tasks", str(root)])
    cells = runner.invoke(main, ["cells", "--tasks", str(root), "--json"])
    explain = runner.invoke(main, ["explain", "--tasks", str(root), "--json"])
    assert cells.exit_code == 0, cells.output
    assert evolve.exit_code == 0, evolve.output
    records = [json.loads(p.read_text()) for p in art.rglob("record.json")]
    by_arm = {r["arm"]: r for r in records}
    # The leaks really happened, so redaction had work to do in each place.
    assert "found:" in (art / by_arm["baseline"]["transcript"]["path"]).read_text()
    assert REDACTED in (art / by_arm["baseline"]["patch"]["path"]).read_text()
    assert REDACTED in by_arm["baseline"]["verify_tail"]
    assert by_arm["cand"]["error_detail"].startswith("model API error (HTTP 500)")
    assert REDACTED in by_arm["cand"]["error_detail"]
    assert list(art.rglob("*.html")) and list(art.rglob("*.md"))
    stored = [
        p for base in (art, tmp_path / "dagster_home") for p in base.rglob("*") if p.is_file()
    ]
    outputs = [evolve.output, cells.output, explain.output]
    for name in SHAPES:
        needle = _secret(name)
        for text in outputs:
            assert needle not in text, name
        for path in stored:
            assert needle.encode() not in path.read_bytes(), (name, path)
