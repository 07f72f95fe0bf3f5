"""The ``command`` adapter: any agent CLI, run from an argv template inside the sandbox.

Placeholders in the template: ``{prompt_file}`` (the prompt, also on stdin), ``{workdir}``
(``/workspace``), ``{model}``, ``{effort}``. The agent may write a usage JSON (the fields of
:class:`~bench_assets.agents.base.Usage`) to ``$WFBENCH_USAGE_FILE``; anything it does not
report is recorded as unknown (null), never as 0.
"""

import json

from pydantic import ValidationError

from bench_assets.agents.base import SCRATCH, SessionContext, SessionResult, Usage, session_sandbox
from bench_assets.errorkinds import ErrorKind
from bench_assets.fsutil import atomic_write_text
from bench_assets.models import CommandAgent
from bench_assets.sandbox import WORKSPACE, Isolation, run, sandbox_env

PROMPT_FILE = f"{SCRATCH}/prompt.md"
USAGE_FILE = f"{SCRATCH}/usage.json"


class CommandAdapter:
    """Runs an arbitrary agent command."""

    name = "command"

    def __init__(self, spec: CommandAgent) -> None:
        self.spec = spec

    def identity(self) -> dict[str, object]:
        """The argv template, network policy and declared version."""
        return {
            "adapter": self.name,
            "argv": list(self.spec.argv),
            "network": self.spec.network,
            "version": self.spec.version,
        }

    def cell_identity(self, task_id: str, run: int) -> dict[str, object]:
        """The same for every cell."""
        return self.identity()

    def run(self, ctx: SessionContext) -> SessionResult:
        """Run the agent once in the worktree."""
        atomic_write_text(ctx.scratch / "prompt.md", ctx.prompt)
        values = {
            "prompt_file": PROMPT_FILE,
            "workdir": WORKSPACE,
            "model": ctx.model,
            "effort": ctx.effort or "",
        }
        argv = [render(a, values) for a in self.spec.argv]
        env = sandbox_env(
            {
                **ctx.secrets_env,
                "WFBENCH_USAGE_FILE": USAGE_FILE,
                "WFBENCH_PROMPT_FILE": PROMPT_FILE,
                "WFBENCH_MODEL": ctx.model,
            }
        )
        res = run(
            argv,
            isolation=Isolation.SANDBOX,
            env=env,
            timeout_s=ctx.timeout_s,
            stdin=ctx.prompt.encode("utf-8"),
            sandbox=session_sandbox(ctx, network=self.spec.network),
        )
        usage, note = _read_usage(ctx)
        transcript = res.stdout + (b"\n--- stderr ---\n" + res.stderr if res.stderr else b"")
        if res.timed_out:
            kind, detail = ErrorKind.SESSION_ERROR, f"timed out after {ctx.timeout_s:g} s"
        elif res.returncode != 0:
            kind, detail = ErrorKind.SESSION_ERROR, f"agent exited {res.returncode}"
        else:
            kind, detail = None, note
        return SessionResult(
            ok=kind is None,
            usage=usage,
            error_kind=kind,
            error_detail=detail,
            transcript=transcript,
            agent_version=self.spec.version,
            wall_s=res.duration_s,
        )


def render(template: str, values: dict[str, str]) -> str:
    """Replace the known ``{name}`` placeholders; other braces (e.g. inline code) stay as-is."""
    for name, value in values.items():
        template = template.replace("{" + name + "}", value)
    return template


def _read_usage(ctx: SessionContext) -> tuple[Usage, str]:
    path = ctx.scratch / "usage.json"
    if not path.is_file() or path.is_symlink():
        return Usage(), ""
    try:
        return Usage.model_validate(json.loads(path.read_text(encoding="utf-8"))), ""
    except (json.JSONDecodeError, ValidationError, UnicodeDecodeError) as e:
        return Usage(), f"usage file ignored (invalid: {str(e).splitlines()[0]})"
