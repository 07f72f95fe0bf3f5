#!/usr/bin/env bash
# Build wfbench's two images on the engine at $DOCKER_HOST, with no image registry:
#
#   base     a minimal Debian bookworm (mmdebstrap, or debootstrap, --variant=minbase) with
#            python3, python3-venv, git, ca-certificates and bubblewrap, loaded by `docker import`;
#   project  the base plus wfbench and deploy/requirements-docker.txt in /opt/wfbench/venv,
#            installed from a local wheelhouse (deploy/docker/Dockerfile), optionally with a tasks
#            snapshot at /opt/wfbench/tasks.
#
# Everything expensive is cached under $WFBENCH_IMAGE_CACHE (default ~/.cache/wfbench/images),
# keyed by its inputs: the base root filesystem by suite, mirror and package list
# (base-<key>.tar); the dependency wheels by pyproject.toml and requirements-docker.txt
# (wheels-<key>/). An image the engine already has under its keyed tag is not rebuilt.
#
# Usage: deploy/docker/build-images.sh [--wheelhouse DIR] [--tasks DIR] [--tag NAME]
#   --wheelhouse DIR  take the dependency wheels from DIR (offline: nothing is downloaded)
#   --tasks DIR       copy DIR into the image as /opt/wfbench/tasks (default: none; mount it)
#   --tag NAME        also tag the project image NAME (e.g. wfbench/wfbench:0.1.0)
# The last two lines of output are `base=<image>` and `project=<image>`.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cache="${WFBENCH_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/wfbench/images}"
python="${PYTHON:-$repo/.venv/bin/python}"
suite=bookworm
mirror="${WFBENCH_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
packages=python3,python3-venv,git,ca-certificates,bubblewrap
wheelhouse="" tasks="" extra_tag=""
while [ $# -gt 0 ]; do
  case "$1" in
    --wheelhouse) wheelhouse="$2"; shift 2 ;;
    --tasks) tasks="$2"; shift 2 ;;
    --tag) extra_tag="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "build-images.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
command -v docker >/dev/null || { echo "build-images.sh: no docker command on PATH" >&2; exit 2; }
mkdir -p "$cache"
# The image runs Debian bookworm's Python 3.11: the wheels must be built by a 3.11 with pip (a venv
# made by uv has no pip; then a plain venv of the same interpreter in the cache does the work).
"$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || {
  echo "build-images.sh: $python is not Python 3.11 (the image's); set PYTHON" >&2; exit 2; }
if ! "$python" -m pip --version >/dev/null 2>&1; then
  [ -x "$cache/pip-venv/bin/python" ] || "$python" -m venv "$cache/pip-venv"
  python="$cache/pip-venv/bin/python"
fi
log() { echo "[build-images $(date +%T)] $*" >&2; }
key() { sha256sum | cut -c1-16; }

# --- base: a minimal bookworm root filesystem --------------------------------------------------
base_key="$(printf '%s\n' "$suite" "$mirror" "$packages" minbase | key)"
base="wfbench-base:$base_key"
if docker image inspect "$base" >/dev/null 2>&1; then
  log "base $base: already in the engine"
else
  tar="$cache/base-$base_key.tar"
  if [ ! -s "$tar" ]; then
    [ "$(id -u)" = 0 ] || { echo "build-images.sh: building the base needs root" >&2; exit 2; }
    log "base: building a minimal $suite root filesystem (a few minutes, once)"
    if command -v mmdebstrap >/dev/null; then
      mmdebstrap --quiet --mode=root --variant=minbase --include="$packages" --format=tar \
        "$suite" "$tar.tmp" "$mirror"
    elif command -v debootstrap >/dev/null; then
      root="$(mktemp -d "$cache/rootfs.XXXXXX")"
      debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" >&2
      rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
      tar -C "$root" -cf "$tar.tmp" .
      rm -rf "$root"
    else
      echo "build-images.sh: neither mmdebstrap nor debootstrap is installed" \
        "(apt-get install mmdebstrap)" >&2
      exit 2
    fi
    mv "$tar.tmp" "$tar"
  fi
  log "base: docker import $tar"
  docker import --change 'ENV LANG=C.UTF-8' "$tar" "$base" >/dev/null
fi

# --- project: dependency wheels (cached by their inputs), then the project on top --------------
deps_key="$(cat "$repo/pyproject.toml" "$repo/deploy/requirements-docker.txt" | key)"
need_wheels() {
  if [ -z "$wheelhouse" ]; then
    wheelhouse="$cache/wheels-$deps_key"
    if [ ! -f "$wheelhouse/.complete" ]; then
      log "wheels: pip wheel . -r deploy/requirements-docker.txt into $wheelhouse (once)"
      rm -rf "$wheelhouse"
      "$python" -m pip wheel -q --disable-pip-version-check --wheel-dir "$wheelhouse" \
        "$repo" -r "$repo/deploy/requirements-docker.txt" 2> >(grep -v '^WARNING: Location' >&2)
      rm -f "$wheelhouse"/wfbench-*.whl
      touch "$wheelhouse/.complete"
    fi
  fi
}

# The tag names the inputs: base, dependency wheels, Dockerfile, project sources (tracked files
# and uncommitted changes) and the tasks snapshot. An image the engine has under it is reused.
project_key="$(
  {
    echo "$base" "$deps_key"
    [ -z "$wheelhouse" ] || ls "$wheelhouse"
    cat "$repo/deploy/docker/Dockerfile" "$repo/deploy/docker/build-images.sh"  # how it is built
    (cd "$repo" && git ls-files -s bench_assets pyproject.toml 2>/dev/null || true)
    (cd "$repo" && git diff HEAD -- bench_assets pyproject.toml 2>/dev/null || true)
    (cd "$repo" && git ls-files -z --others --exclude-standard bench_assets 2>/dev/null \
      | xargs -0 -r sha256sum || true)
    [ -z "$tasks" ] || (cd "$tasks" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
  } | key
)"
project="wfbench/wfbench:$project_key"
if docker image inspect "$project" >/dev/null 2>&1; then
  log "project $project: already in the engine"
else
  need_wheels
  stage="$(mktemp -d "$cache/context.XXXXXX")"
  trap 'rm -rf "$stage"' EXIT
  mkdir -p "$stage/deps" "$stage/project" "$stage/tasks"
  find "$wheelhouse" -maxdepth 1 -name '*.whl' ! -name 'wfbench-*' -exec cp {} "$stage/deps/" \;
  # The wheel is built from a copy of the files git lists (tracked and untracked, not ignored,
  # still present), never from the checkout itself: setuptools reuses the checkout's build/lib,
  # where a module deleted or moved since an earlier build survives and is packaged again (a
  # moved Dagster schedule was then defined twice inside the image).
  src="$stage/src"
  mkdir -p "$src"
  if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$repo" && git ls-files -z --cached --others --exclude-standard \
      | while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done \
      | tar --null -T - -cf -) | tar -C "$src" -xf -
  else  # not a git checkout (an unpacked source archive): everything but build output
    (cd "$repo" && tar --exclude=./build --exclude=./.venv --exclude='*.egg-info' -cf - .) \
      | tar -C "$src" -xf -
  fi
  log "project: pip wheel --no-deps (a clean copy of the tree)"
  "$python" -m pip wheel -q --disable-pip-version-check --no-deps \
    --wheel-dir "$stage/project" "$src" 2> >(grep -v '^WARNING: Location' >&2)
  rm -rf "$src"  # not part of the image's build context
  [ -z "$tasks" ] || cp -a "$tasks/." "$stage/tasks/"
  cp "$repo/deploy/docker/Dockerfile" "$stage/Dockerfile"
  cp "$repo/pyproject.toml" "$stage/pyproject.toml"
  log "project: docker build $project"
  DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE=$base" -t "$project" "$stage" >/dev/null
fi
[ -z "$extra_tag" ] || docker tag "$project" "$extra_tag"
echo "base=$base"
echo "project=$project"
