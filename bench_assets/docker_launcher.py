"""``DockerRunLauncher`` that unmasks ``/proc`` the way the Docker Engine API expects.

Every cell's sandbox (bubblewrap) mounts a fresh ``/proc`` in a new user namespace, and the kernel
refuses that while the container's ``/proc`` has masked or read-only sub-paths (``bwrap: Can't
mount proc on /newroot/proc: Operation not permitted``). ``docker run --security-opt
systempaths=unconfined`` turns the masking off, but only because the ``docker`` command line
translates the option before calling the engine: it drops it from ``SecurityOpt`` and sends
``HostConfig.MaskedPaths = []`` and ``HostConfig.ReadonlyPaths = []`` (empty lists, which replace
the engine's defaults; an absent field keeps them). The Python client that
``dagster_docker.DockerRunLauncher`` uses sends the option raw and the engine refuses to create the
container (``500 … invalid --security-opt 2: "systempaths=unconfined"``; docker/docker-py#3377,
the unmerged fix docker/docker-py#3440, the same in docker/compose#9505).

:class:`WfbenchDockerRunLauncher` makes the same translation as the command line, so
``deploy/docker/dagster.yaml`` states the option once, with the meaning it has for ``docker run``,
and Docker's engine accepts it. Podman's Docker-compatible socket is the exception: it accepts the
option raw and does *not* unmask for empty lists, so against podman (``GET /version`` names a
"Podman Engine" component) the body goes unchanged. Nothing else of the launcher changes.
Configure it with::

    run_launcher:
      module: bench_assets.docker_launcher
      class: WfbenchDockerRunLauncher
      config: {...the DockerRunLauncher config...}

This module imports ``dagster_docker`` (``deploy/requirements-docker.txt``); nothing else in
wfbench imports this module, so machines without the integration never load it. It stands at the
package's top, beside ``definitions.py``: both are what Dagster loads by module name from its
configuration (the code location; the instance's run launcher). It is not the driver's (code that
drives Dagster from outside) nor ``defs/``'s (the code location loads every module there).
"""

from collections.abc import Callable
from typing import Any

from dagster_docker import DockerRunLauncher

SYSTEMPATHS_UNCONFINED = "systempaths=unconfined"
"""The ``--security-opt`` value that means "mask no path under ``/proc`` and ``/sys``"."""


def unmask_system_paths(config: dict[str, Any]) -> dict[str, Any]:
    """The engine's container-create body with ``systempaths=unconfined`` translated.

    ``config`` is the JSON body of ``POST /containers/create``. When its
    ``HostConfig.SecurityOpt`` holds ``systempaths=unconfined``, the option is removed and
    ``HostConfig.MaskedPaths`` and ``HostConfig.ReadonlyPaths`` become empty lists, exactly what
    ``docker run --security-opt systempaths=unconfined`` sends. Every other option (``seccomp=…``,
    ``apparmor=…``, ``label=…``) goes to the engine as given; without the option nothing changes.
    """
    host = config.get("HostConfig") or {}
    opts = host.get("SecurityOpt") or []
    if SYSTEMPATHS_UNCONFINED not in opts:
        return config
    kept = [o for o in opts if o != SYSTEMPATHS_UNCONFINED]
    host = {**host, "SecurityOpt": kept or None, "MaskedPaths": [], "ReadonlyPaths": []}
    return {**config, "HostConfig": host}


def unmasking(create: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a docker ``APIClient.create_container_from_config`` (the one call that posts a new
    container's body to the engine) with :func:`unmask_system_paths`."""

    def create_from_config(config: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        return create(unmask_system_paths(config), *args, **kwargs)

    return create_from_config


def is_podman(version: dict[str, Any]) -> bool:
    """Whether an engine's ``GET /version`` answer comes from podman's Docker-compatible API.

    Podman accepts ``systempaths=unconfined`` raw and unmasks ``/proc`` for it, but ignores empty
    ``MaskedPaths``/``ReadonlyPaths`` (measured with podman 4.3.1: bwrap then cannot mount proc),
    so the translation is made for Docker's engine only.
    """
    components = version.get("Components") or []
    return any(str(c.get("Name", "")).startswith("Podman") for c in components)


class WfbenchDockerRunLauncher(DockerRunLauncher):  # type: ignore[misc]
    """One container per run, with ``systempaths=unconfined`` translated for Docker's engine."""

    def _get_client(self, container_context: Any) -> Any:
        client = super()._get_client(container_context)
        if not is_podman(client.version()):
            # The client is made for this one launch; only the call that posts the body changes.
            api = client.api
            api.create_container_from_config = unmasking(api.create_container_from_config)
        return client
