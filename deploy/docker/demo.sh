#!/usr/bin/env bash
# `make docker-demo`: the bundled demo's two generations with every queued run (each task's inputs,
# each paid cell) in its own container, launched by deploy/docker/dagster.yaml's run launcher.
#
#   1. an engine: $DOCKER_HOST if it answers, else a private dockerd (root; Debian `docker.io`)
#      started here with no bridge and no iptables, stopped by its PID at the end;
#   2. images: deploy/docker/build-images.sh (cached; WHEELHOUSE=DIR installs the project's
#      dependencies from DIR with nothing downloaded);
#   3. one shared folder ($WFBENCH_DOCKER_DEMO, default dagster_home/docker-demo) mounted at the
#      same path in every container: the tasks copy, the artifact root, DAGSTER_HOME, compute logs;
#   4. a code server and dagster-daemon in containers of the project image (the daemon with the
#      engine's socket), on the host network;
#   5. `wfbench evolve --workspace` twice from this machine, then `wfbench explain`.
#
# Storage is sqlite in the shared DAGSTER_HOME (one machine, as `make demo`); for several machines
# keep deploy/docker/dagster.yaml's PostgreSQL block (tests/test_containers.py runs it that way).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
venv="${VENV:-$repo/.venv}"
cache="${WFBENCH_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/wfbench/images}"
work="$(mkdir -p "${WFBENCH_DOCKER_DEMO:-$repo/dagster_home/docker-demo}" && cd "${WFBENCH_DOCKER_DEMO:-$repo/dagster_home/docker-demo}" && pwd)"
port="${WFBENCH_CODE_PORT:-4266}"
log() { echo "[docker-demo $(date +%T)] $*" >&2; }

engine_pid="" names=() run=/tmp/wfbench-demo-dockerd
cleanup() {
  for name in "${names[@]}"; do docker logs "$name" >"$work/$name.log" 2>&1 || true; done
  [ ${#names[@]} -eq 0 ] || docker rm -f "${names[@]}" >/dev/null 2>&1 || true
  if [ -n "$engine_pid" ]; then
    log "stopping dockerd (pid $engine_pid)"
    kill "$engine_pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$engine_pid" 2>/dev/null || break; sleep 0.2; done
    # dockerd leaves its exec root's netns/default bind-mounted
    awk -v d="$run/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r \
      | xargs -r -n1 umount 2>/dev/null || true
  fi
}
trap cleanup EXIT
trap 'exit 143' TERM INT

if ! docker version >/dev/null 2>&1; then
  command -v dockerd >/dev/null || { echo "docker-demo: no engine answers and dockerd is not" \
    "installed (Debian: apt-get install docker.io mmdebstrap)" >&2; exit 2; }
  [ "$(id -u)" = 0 ] || { echo "docker-demo: starting dockerd needs root" >&2; exit 2; }
  mkdir -p "$run" "$cache"
  exec 9>"$cache/engine.lock"  # one engine per data root (tests/test_containers.py takes it too)
  flock -n 9 || { echo "docker-demo: another engine uses $cache/engine" >&2; exit 2; }
  dockerd --storage-driver overlay2 --bridge=none --iptables=false --ip-masq=false \
    --host "unix://$run/docker.sock" --data-root "$cache/engine" --exec-root "$run/exec" \
    --pidfile "$run/dockerd.pid" >"$work/dockerd.log" 2>&1 &
  engine_pid=$!
  export DOCKER_HOST="unix://$run/docker.sock"
  for _ in $(seq 150); do docker version >/dev/null 2>&1 && break; sleep 0.2; done
  docker version >/dev/null || { tail -20 "$work/dockerd.log" >&2; exit 2; }
  log "dockerd pid $engine_pid on $DOCKER_HOST"
fi
sock="${DOCKER_HOST#unix://}"
[ "$sock" != "$DOCKER_HOST" ] || sock=/var/run/docker.sock

images="$(PYTHON="$venv/bin/python" deploy/docker/build-images.sh ${WHEELHOUSE:+--wheelhouse "$WHEELHOUSE"})"
project="$(sed -n 's/^project=//p' <<<"$images")"
log "project image $project"

rm -rf "$work/tasks" "$work/home" "$work/artifacts" "$work/compute-logs"
cp -a tasks "$work/tasks"
rm -rf "$work/tasks/.git"
mkdir -p "$work/home" "$work/compute-logs"
"$venv/bin/python" - "$work" "$project" "$port" <<'EOF'
import sys
from pathlib import Path

import yaml

work, image = Path(sys.argv[1]), sys.argv[2]
config = yaml.safe_load(Path("deploy/docker/dagster.yaml").read_text())
del config["storage"]  # sqlite under DAGSTER_HOME, on the shared folder
config["run_coordinator"]["config"] = {"dequeue_interval_seconds": 1}
config["compute_logs"]["config"]["base_dir"] = str(work / "compute-logs")
launcher = config["run_launcher"]["config"]
launcher["image"] = image
launcher["network"] = "host"
launcher["env_vars"] = [
    f"DAGSTER_HOME={work / 'home'}",
    f"WFBENCH_ARTIFACTS={work / 'artifacts'}",
    f"WFBENCH_TASKS={work / 'tasks'}",
]
kwargs = launcher["container_kwargs"]  # the sandbox options (security_opt) stay as shipped
kwargs["working_dir"] = str(work)
kwargs["volumes"] = [f"{work}:{work}:rw"]
(work / "home" / "dagster.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
grpc = {"host": "127.0.0.1", "port": int(sys.argv[3]), "location_name": "bench_assets"}
(work / "workspace.yaml").write_text(yaml.safe_dump({"load_from": [{"grpc_server": grpc}]}))
EOF

export DAGSTER_HOME="$work/home" WFBENCH_ARTIFACTS="$work/artifacts" WFBENCH_TASKS="$work/tasks"
common=(--network host -v "$work:$work:rw" -w "$work" -e "DAGSTER_HOME=$DAGSTER_HOME"
        -e "WFBENCH_ARTIFACTS=$WFBENCH_ARTIFACTS" -e "WFBENCH_TASKS=$WFBENCH_TASKS")
names=(wfbench-demo-code wfbench-demo-daemon)
docker rm -f "${names[@]}" >/dev/null 2>&1 || true
docker run -d --name wfbench-demo-code "${common[@]}" "$project" dagster code-server start \
  -h 127.0.0.1 -p "$port" -m bench_assets.definitions --location-name bench_assets \
  --container-image "$project" >/dev/null
docker run -d --name wfbench-demo-daemon "${common[@]}" -v "$sock:/var/run/docker.sock" \
  "$project" dagster-daemon run -w "$work/workspace.yaml" >/dev/null
log "code server and daemon started; syncing partitions and pool limits"
"$venv/bin/wfbench" validate "$WFBENCH_TASKS"
for _ in $(seq 180); do
  "$venv/bin/python" -c "
from dagster._grpc.client import DagsterGrpcClient
import sys; sys.exit(DagsterGrpcClient(port=$port, host='127.0.0.1').ping('x')['echo'] != 'x')" \
    2>/dev/null && break
  sleep 1
done
"$venv/bin/wfbench" sync --tasks "$WFBENCH_TASKS"
# evolve starts a daemon of its own (on this machine, without the Docker launcher) when none has
# heartbeated: wait for the container's first heartbeat (slow on a loaded machine).
"$venv/bin/python" - <<'EOF'
import sys
import time

import dagster as dg

deadline = time.monotonic() + 300
with dg.DagsterInstance.get() as instance:
    while time.monotonic() < deadline:
        beat = instance.get_daemon_heartbeats().get("QUEUED_RUN_COORDINATOR")
        if beat is not None and time.time() - beat.timestamp < 60:
            sys.exit(0)
        time.sleep(1)
sys.exit("docker-demo: no daemon heartbeat in 300 s (docker logs wfbench-demo-daemon)")
EOF
log "daemon container heartbeating"
for g in 1 2; do
  log "generation $g through containers"
  "$venv/bin/wfbench" evolve --tasks "$WFBENCH_TASKS" --workspace "$work/workspace.yaml"
done
"$venv/bin/wfbench" explain
log "run containers: $(docker ps -aq --filter label=dagster/run_id | wc -l) (one per queued run)"
log "compare with make demo's decisions (same commit): $venv/bin/python" \
  "deploy/docker/compare-decisions.py --artifacts dagster_home/artifacts $work/artifacts" \
  "--tasks tasks $work/tasks"
