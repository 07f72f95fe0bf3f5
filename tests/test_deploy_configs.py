"""The example deployments in deploy/ are valid Dagster instance configs with matching pins.

CI installs dagster-docker (``.ci/run``: ``deploy/requirements-docker.txt``) but not dagster-k8s,
so each run launcher's own config schema is applied only when its package is importable; otherwise
its module, class, required fields and the wfbench-specific settings (shared artifact root, tasks
snapshot, sandbox permissions) are checked as data. The Docker file is also run for real on an
engine by tests/test_containers.py; the Kubernetes one is not run anywhere (no cluster here).
Everything Dagster itself ships (the instance schema, PostgreSQL storage, the run queue, compute
logs) is validated always, and each config is started as a real instance against the test
PostgreSQL server with only the run launcher swapped for the default one.
"""

import importlib.util
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from dagster._config import validate_config
from dagster._core.instance.config import dagster_instance_config
from dagster._serdes.config_class import ConfigurableClassData, class_from_code_pointer

from tests.conftest import REPO_ROOT
from tests.pg import PgServer, pg_server  # noqa: F401  (the session fixture)

DEPLOY = REPO_ROOT / "deploy"
ARTIFACTS = "/var/lib/wfbench/artifacts"

LAUNCHERS = {
    "k8s": ("dagster_k8s", "K8sRunLauncher", "dagster-k8s"),
    "docker": ("bench_assets.docker_launcher", "WfbenchDockerRunLauncher", "dagster-docker"),
}


def load(kind: str) -> dict[str, Any]:
    return dict(yaml.safe_load((DEPLOY / kind / "dagster.yaml").read_text()))


def env_list(values: list[str]) -> dict[str, str | None]:
    """``KEY=VALUE`` / ``KEY`` entries as a mapping (None: taken from the launcher's env)."""
    out: dict[str, str | None] = {}
    for item in values:
        key, sep, value = item.partition("=")
        out[key] = value if sep else None
    return out


def configurable(block: dict[str, Any]) -> tuple[type, dict[str, Any]]:
    """The class a ``{module, class, config}`` block names, resolved as Dagster resolves it (the
    public ``dagster.core`` module names map to ``dagster._core``), and its config."""
    data = ConfigurableClassData(
        block["module"], block["class"], yaml.safe_dump(block.get("config") or {})
    )
    return class_from_code_pointer(data.module_name, data.class_name), dict(data.config_dict)


def assert_valid_for(cls: type, config: dict[str, Any]) -> None:
    result = validate_config(cls.config_type(), config)  # type: ignore[attr-defined]
    assert result.success, [e.message for e in result.errors or []]


@pytest.mark.parametrize("kind", sorted(LAUNCHERS))
def test_instance_schema_storage_queue_and_compute_logs_are_valid(
    kind: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text((DEPLOY / kind / "dagster.yaml").read_text())
    config, custom_class = dagster_instance_config(str(home))  # Dagster's own schema check
    assert custom_class is None
    pg = config["storage"]["postgres"]["postgres_db"]
    assert pg["scheme"] == "postgresql+psycopg2", "SQLAlchemy 2.1 needs the psycopg2 scheme"
    assert pg["password"] == {"env": "DAGSTER_PG_PASSWORD"}, "no password in the file"
    assert config["concurrency"]["pools"]["granularity"] == "run"
    for key in ("run_coordinator", "compute_logs"):
        cls, cfg = configurable(config[key])
        assert_valid_for(cls, cfg)
    assert config["run_coordinator"]["class"] == "QueuedRunCoordinator"
    assert config["compute_logs"]["config"]["base_dir"].startswith("/var/lib/wfbench/")
    from dagster_postgres import DagsterPostgresStorage

    assert_valid_for(DagsterPostgresStorage, config["storage"]["postgres"])


def test_k8s_run_launcher_settings() -> None:
    launcher = load("k8s")["run_launcher"]
    assert (launcher["module"], launcher["class"]) == LAUNCHERS["k8s"][:2]
    cfg = launcher["config"]
    assert cfg["instance_config_map"], "K8sRunLauncher's one required field"
    assert cfg["postgres_password_secret"], "run pods get DAGSTER_PG_PASSWORD from this secret"
    env = env_list(cfg["env_vars"])
    assert env["WFBENCH_ARTIFACTS"] == ARTIFACTS
    assert env["WFBENCH_TASKS"] == "/opt/wfbench/tasks"
    mounts = {m["mount_path"]: m["name"] for m in cfg["volume_mounts"]}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in cfg["volumes"]}
    assert mounts[ARTIFACTS] in claims, "the artifact root is a mounted claim"
    run_k8s = cfg["run_k8s_config"]
    assert run_k8s["pod_spec_config"]["host_users"] is False
    security = run_k8s["container_config"]["security_context"]
    assert security["proc_mount"] == "Unmasked"
    assert security["seccomp_profile"] == {"type": "Unconfined"}
    assert "privileged" not in security, "the sandbox needs namespaces, not a privileged pod"


def test_k8s_run_launcher_against_its_own_schema() -> None:
    if importlib.util.find_spec("dagster_k8s") is None:
        pytest.skip("dagster-k8s is not installed (deliberately not in CI): schema not applied")
    launcher = load("k8s")["run_launcher"]
    cls, config = configurable(launcher)
    assert_valid_for(cls, config)
    import kubernetes
    from dagster_k8s.models import k8s_model_from_dict

    run_k8s = config["run_k8s_config"]
    pod = k8s_model_from_dict(
        kubernetes.client.V1PodSpec, {"containers": [], **run_k8s["pod_spec_config"]}
    )
    assert pod.host_users is False
    container = k8s_model_from_dict(
        kubernetes.client.V1Container, {"name": "run", **run_k8s["container_config"]}
    )
    assert container.security_context.proc_mount == "Unmasked"


def test_docker_run_launcher_settings() -> None:
    launcher = load("docker")["run_launcher"]
    assert (launcher["module"], launcher["class"]) == LAUNCHERS["docker"][:2]
    cfg = launcher["config"]
    assert cfg["image"] and cfg["network"]
    env = env_list(cfg["env_vars"])
    assert env["WFBENCH_ARTIFACTS"] == ARTIFACTS
    assert env["WFBENCH_TASKS"] == "/opt/wfbench/tasks"
    assert "DAGSTER_PG_PASSWORD" in env and env["DAGSTER_PG_PASSWORD"] is None
    kwargs = cfg["container_kwargs"]
    # DockerRunLauncher refuses these inside container_kwargs (they have their own keys).
    assert not {"image", "environment", "network"} & set(kwargs)
    targets = {v.split(":")[1] for v in kwargs["volumes"]}
    assert ARTIFACTS in targets
    assert {"seccomp=unconfined", "systempaths=unconfined"} <= set(kwargs["security_opt"])
    assert not kwargs.get("privileged")


def test_docker_run_launcher_against_its_own_schema() -> None:
    if importlib.util.find_spec("dagster_docker") is None:
        pytest.skip("dagster-docker is not installed (.ci/run installs it): schema not applied")
    launcher = load("docker")["run_launcher"]
    cls, config = configurable(launcher)
    assert_valid_for(cls, config)
    from dagster_docker.utils import validate_docker_config, validate_docker_image

    validate_docker_config(
        config.get("network"), config.get("networks"), config["container_kwargs"]
    )
    validate_docker_image(config["image"])
    from dagster_docker import DockerRunLauncher

    assert issubclass(cls, DockerRunLauncher), "only the engine call differs from upstream's"


def test_docker_launcher_translates_systempaths_as_the_docker_command_line_does() -> None:
    """``systempaths=unconfined`` leaves SecurityOpt and empties MaskedPaths and ReadonlyPaths
    (the engine refuses the raw option); other options and bodies without it stay as they are."""
    if importlib.util.find_spec("dagster_docker") is None:
        pytest.skip("dagster-docker is not installed (.ci/run installs it)")
    from bench_assets.docker_launcher import unmask_system_paths, unmasking

    shipped = load("docker")["run_launcher"]["config"]["container_kwargs"]["security_opt"]
    body = {"Image": "x", "HostConfig": {"SecurityOpt": shipped, "Binds": ["a:/a:rw"]}}
    out = unmask_system_paths(body)
    assert out["HostConfig"] == {
        "SecurityOpt": [o for o in shipped if o != "systempaths=unconfined"],
        "Binds": ["a:/a:rw"],
        "MaskedPaths": [],
        "ReadonlyPaths": [],
    }
    assert out["Image"] == "x" and body["HostConfig"]["SecurityOpt"] == shipped, "not mutated"
    only = unmask_system_paths({"HostConfig": {"SecurityOpt": ["systempaths=unconfined"]}})
    assert only["HostConfig"]["SecurityOpt"] is None and only["HostConfig"]["MaskedPaths"] == []
    plain = {"HostConfig": {"SecurityOpt": ["seccomp=unconfined"]}}
    assert unmask_system_paths(plain) == plain and "MaskedPaths" not in plain["HostConfig"]
    assert unmask_system_paths({"Image": "x"}) == {"Image": "x"}
    sent: list[dict] = []
    unmasking(lambda config, *a, **k: sent.append(config))(body, name=None)
    assert sent == [out]


def test_docker_launcher_leaves_the_option_raw_for_podman() -> None:
    """Podman's socket unmasks for the raw option and ignores empty lists: no translation there."""
    if importlib.util.find_spec("dagster_docker") is None:
        pytest.skip("dagster-docker is not installed (.ci/run installs it)")
    from bench_assets.docker_launcher import is_podman

    podman = {"Components": [{"Name": "Podman Engine"}, {"Name": "Conmon"}], "Version": "4.3.1"}
    docker = {"Components": [{"Name": "Engine"}, {"Name": "containerd"}], "Version": "20.10.24"}
    assert is_podman(podman) and not is_podman(docker) and not is_podman({})


PIN = re.compile(r"([A-Za-z0-9_.-]+)==([0-9][0-9A-Za-z.]*)")


def exact_pins(lines: list[str], *, strict: bool) -> dict[str, str]:
    """``name==version`` requirements by lower-case name; ``strict``: every line must be one."""
    out = {}
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = PIN.fullmatch(line)
        assert m or not strict, f"not an exact pin: {line!r}"
        if m:
            out[m.group(1).lower()] = m.group(2)
    return out


@pytest.mark.parametrize("kind", sorted(LAUNCHERS))
def test_requirements_pin_the_projects_dagster_family(kind: str) -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    declared = exact_pins(
        project["dependencies"] + project["optional-dependencies"]["dev"], strict=False
    )
    core = declared["dagster"]
    integration = declared["dagster-postgres"]
    pins = exact_pins((DEPLOY / f"requirements-{kind}.txt").read_text().splitlines(), strict=True)
    package = LAUNCHERS[kind][2]
    assert pins[package] == integration, f"{package} must match dagster-postgres {integration}"
    for name, version in pins.items():
        expected = core if version.startswith("1.") else integration
        assert version == expected, f"{name}=={version} is not of the Dagster {core} family"
        if name in declared:
            assert declared[name] == version, f"{name}: pyproject pins {declared[name]}"
    assert {"dagster", "dagster-webserver", "dagster-postgres"} <= set(pins)


@pytest.mark.parametrize("kind", sorted(LAUNCHERS))
def test_example_instance_starts_on_postgres(
    kind: str,
    tmp_path: Path,
    pg_server: PgServer,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The whole file instantiates (storage, queue, pools, compute logs) against a real server;
    only the addresses, the log folder and the run launcher are swapped."""
    import dagster as dg

    config = load(kind)
    db = pg_server.create_database(f"deploy_{kind}")
    pg = config["storage"]["postgres"]["postgres_db"]
    pg |= {k: pg_server.postgres_db(db)[k] for k in ("hostname", "port", "username", "db_name")}
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "")
    config["compute_logs"]["config"]["base_dir"] = str(tmp_path / "compute-logs")
    # Constructing the real launcher would need its package and reach for a cluster or a daemon.
    config["run_launcher"] = {"module": "dagster", "class": "DefaultRunLauncher"}
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        assert instance.get_concurrency_config().pool_config.pool_granularity.value == "run"
        instance.event_log_storage.set_concurrency_slots("agent_sessions", 2)
        assert instance.event_log_storage.get_concurrency_info("agent_sessions").slot_count == 2
