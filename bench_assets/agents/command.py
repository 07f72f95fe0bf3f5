"""The ``command`` adapter: any agent CLI, run from an argv template inside the sandbox.

Placeholders in the template: ``{prompt_file}`` (the prompt, also on stdin), ``{workdir}``
(``/workspace``), ``{model}``, ``{effort}``. With ``network: model-api`` the sandbox has no network
but the model API, at ``$WFBENCH_MODEL_API_URL`` (also ``$ANTHROPIC_BASE_URL``) through the
harness's egress proxy. The agent may write a usage JSON (the fields of
:class:`~bench_assets.agents.base.Usage`) to ``$WFBENCH_USAGE_FILE``; anything it does not
report is recorded as unknown (null), never as 0.
"""

import json

from pydantic import ValidationError

from bench_assets.agents.base import SCRATCH, SessionContext, SessionResult, Usage, session_sandbox
from bench_assets.config.models import CommandAgent
from bench_assets.kernel.errorkinds import ErrorKind
from bench_assets.kernel.errors import ContainmentError
from bench_assets.kernel.fsutil import atomic_write_text
from bench_assets.sandbox.egress import BASE_URL_ENV, ModelApiProxy, resolve_upstream
from bench_assets.sandbox.process import WORKSPACE, Isolation, run, sandbox_env

PROMPT_FILE = f"{SCRATCH}/prompt.md"
USAGE_FILE = f"{SCRATCH}/usage.json"
MODEL_API_EXPORTS = ("WFBENCH_MODEL_API_URL", BASE_URL_ENV)
"""With ``network: model-api``, the variables holding the egress proxy's URL inside."""


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
        # The scratch folder outlives a session in a multi-session arm: a usage file left by an
        # earlier phase must never be read as this session's.
        (ctx.scratch / "usage.json").unlink(missing_ok=True)
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
                **ctx.env_vars,
                **ctx.secrets_env,
                "WFBENCH_USAGE_FILE": USAGE_FILE,
                "WFBENCH_PROMPT_FILE": PROMPT_FILE,
                "WFBENCH_MODEL": ctx.model,
            }
        )
        if self.spec.network == "model-api":
            try:
                upstream = resolve_upstream(self.spec.api_base_url, self.spec.env, ctx.secrets_env)
            except ContainmentError as e:
                return SessionResult(
                    ok=False,
                    usage=Usage(),
                    error_kind=ErrorKind.INFRA_ERROR,
                    error_detail=str(e),
                    agent_version=self.spec.version,
                )
            # The agent's own credentials (from env) pass through the proxy unchanged: wfbench
            # cannot know how an arbitrary CLI authenticates.
            with ModelApiProxy(upstream, timeout_s=ctx.timeout_s) as proxy:
                res = run(
                    argv,
                    isolation=Isolation.SANDBOX,
                    env=env,
                    timeout_s=ctx.timeout_s,
                    stdin=ctx.prompt.encode("utf-8"),
                    sandbox=session_sandbox(
                        ctx, network=False, model_api=proxy.channel(MODEL_API_EXPORTS)
                    ),
                )
        else:
            res = run(
                argv,
                isolation=Isolation.SANDBOX,
                env=env,
                timeout_s=ctx.timeout_s,
                stdin=ctx.prompt.encode("utf-8"),
                sandbox=session_sandbox(ctx, network=self.spec.network is True),
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
