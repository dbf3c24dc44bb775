#!/usr/bin/env bash
# Build the project's images on the local Docker engine, with or without a registry (`make images`).
#
#   docker/build-images.sh [training] [torch] [airflow]      (default: all three)
#
# Image names (stable; other tooling, e.g. a containerd import, relies on them):
#   training-debian:bookworm      local base: Debian bookworm (python3 = 3.11) by debootstrap -> docker import
#   training-base:latest          the training runtime image ([training] default_image in airflow.cfg)
#   training-torch-base:2.13.0    the Python base + torch 2.13.0 and numpy (packed from the project's venv)
#   training-torch:latest         the training image (docker/training.Dockerfile) built on training-torch-base
#   training-airflow-base:3.3.2   local stand-in for apache/airflow:3.3.2-python3.11
#   training-airflow:latest       the Airflow image (requirements, operators, runtime, dags, plugins)
#
# Base images: TRAINING_IMAGE_BASE=registry builds FROM python:3.11-slim and apache/airflow:3.3.2-python3.11,
# =debian FROM the local Debian base; =auto (default) uses the registry images when they are already
# present or can be pulled, else the Debian base. Nothing inside a build reaches the network: the runtime
# and project come as wheels built on the host, Airflow's requirements from a wheelhouse built on the
# host (it trusts this machine's CA; build containers do not), torch packed from the project's venv.
#
# Caching: the rootfs tarball, the wheelhouse and the torch tarball live under $TOOLS_CACHE/images
# (default ~/.cache/training-jobs/images), outside the repository, so fresh clones reuse them. Each image
# carries a label with a hash of its inputs (Dockerfile, sources, base image id): an image whose label
# matches is not built again, and a rebuild reuses Docker's layer cache.
#
# No engine answering: says so and exits 0 (the real-engine tests skip with that reason).
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS_CACHE=${TOOLS_CACHE:-$HOME/.cache/training-jobs}
CACHE=$TOOLS_CACHE/images
PY=${PY:-.venv/bin/python}
BASE=${TRAINING_IMAGE_BASE:-auto}
STAGE=build/images
LABEL=org.training-jobs.inputs
DEBIAN_IMAGE=training-debian:bookworm
PYTHON_IMAGE=python:3.11-slim
OFFICIAL_AIRFLOW=apache/airflow:3.3.2-python3.11
AIRFLOW_VERSION=3.3.2
TORCH=torch==2.13.0
TORCH_PACKAGES="$TORCH numpy==2.4.6"

log() { echo "images: $*" >&2; }

if ! timeout 10 docker info >/dev/null 2>&1; then
    log "no Docker engine answers (docker info); not building images (run docker/ensure-engine.sh as root)"
    exit 0
fi
export DOCKER_BUILDKIT=0  # the engine's own (legacy) builder: Debian's docker.io has no buildx

# A short hash of files' contents and extra strings.
key_of() {
    { for arg in "$@"; do
          if [ -d "$arg" ]; then
              find "$arg" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum
          elif [ -f "$arg" ]; then sha256sum "$arg"
          else echo "$arg"; fi
      done; } | sha256sum | cut -c1-16
}
image_id() { docker image inspect -f '{{.Id}}' "$1" 2>/dev/null || true; }
fresh() {  # fresh IMAGE KEY: the image exists and was built from these inputs
    [ "$(docker image inspect -f "{{index .Config.Labels \"$LABEL\"}}" "$1" 2>/dev/null || true)" = "$2" ]
}
build() {  # build IMAGE KEY DOCKERFILE CONTEXT [docker build args...]
    local image=$1 key=$2 dockerfile=$3 context=$4
    shift 4
    log "building $image ($dockerfile)"
    local started=$SECONDS
    local out status=0  # docker's status, not the filter's: a failed build fails make images
    out=$(nice -n 10 docker build -q --force-rm --label "$LABEL=$key" -t "$image" -f "$dockerfile" "$@" "$context" 2>&1 >/dev/null) || status=$?
    printf '%s\n' "$out" | grep -v -e "legacy builder is deprecated" -e "BuildKit is currently disabled" -e "environment-variable." -e "^$" >&2 || true
    if [ "$status" != 0 ]; then log "building $image failed (docker build exited $status)"; return "$status"; fi
    log "built $image in $((SECONDS - started)) s"
}

# ---- which base images ---------------------------------------------------------------------------------
use_registry() {
    case "$BASE" in
        registry) return 0 ;;
        debian) return 1 ;;
    esac
    [ -n "$(image_id "$PYTHON_IMAGE")" ] && return 0
    [ -n "$(image_id "$DEBIAN_IMAGE")" ] && return 1  # decided on an earlier run: no network probe
    log "probing the registry for $PYTHON_IMAGE"
    timeout 60 docker pull -q "$PYTHON_IMAGE" >/dev/null 2>&1
}

debian_base() {
    local key tarball
    key=$(key_of docker/debian-rootfs.sh)
    fresh "$DEBIAN_IMAGE" "$key" && return 0
    tarball=$CACHE/debian-bookworm-$key.tar
    if [ ! -f "$tarball" ]; then
        docker/debian-rootfs.sh "$tarball"
    fi
    log "importing $tarball as $DEBIAN_IMAGE"
    docker import \
        --change "LABEL $LABEL=$key" \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'ENV PIP_BREAK_SYSTEM_PACKAGES=1' \
        --change 'CMD ["/bin/bash"]' \
        "$tarball" "$DEBIAN_IMAGE" >/dev/null
}

python_base() {
    if use_registry; then
        echo "$PYTHON_IMAGE"
    else
        debian_base
        echo "$DEBIAN_IMAGE"
    fi
}

# ---- wheels built on the host ------------------------------------------------------------------------
project_wheels() {  # the runtime and the operators package, without dependencies
    rm -rf "$STAGE/wheels/runtime" "$STAGE/wheels/project"
    mkdir -p "$STAGE/wheels/runtime" "$STAGE/wheels/project"
    "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$STAGE/wheels/runtime" ./runtime
    "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$STAGE/wheels/project" . ./runtime
    rm -rf runtime/build build/lib build/bdist.*  # setuptools' in-tree build directories
}

airflow_wheelhouse() {  # every pin of requirements.txt as a wheel, cached by the file's content
    local dir
    dir=$CACHE/wheels/airflow-$(key_of requirements.txt)
    if [ ! -f "$dir/.complete" ]; then
        log "building the Airflow wheelhouse from requirements.txt into $dir (once)"
        mkdir -p "$dir"
        "$PY" -m pip wheel -q --no-cache-dir -r requirements.txt -w "$dir"
        touch "$dir/.complete"
    fi
    rm -rf "$STAGE/wheels/airflow"
    mkdir -p "$STAGE/wheels/airflow"
    # Hard links when the cache is on the same file system, copies otherwise.
    cp -l "$dir"/*.whl "$STAGE/wheels/airflow/" 2>/dev/null || cp "$dir"/*.whl "$STAGE/wheels/airflow/"
}

# ---- the images -----------------------------------------------------------------------------------------
training_image() {
    local base key
    base=$(python_base)
    key=$(key_of docker/training.Dockerfile runtime/pyproject.toml runtime/training_runtime "$(image_id "$base")")
    fresh training-base:latest "$key" && { log "training-base:latest is up to date"; return 0; }
    project_wheels
    build training-base:latest "$key" docker/training.Dockerfile . --build-arg "BASE_IMAGE=$base"
}

torch_image() {  # the torch layer on the Python base, then the training image's Dockerfile on top of it
    local base pack key context torch_base=training-torch-base:${TORCH#torch==}
    base=$(python_base)
    pack=$("$PY" docker/pack_site.py --key $TORCH_PACKAGES)
    key=$(key_of docker/torch.Dockerfile "$pack" "$(image_id "$base")")
    if ! fresh "$torch_base" "$key"; then
        context=$CACHE/torch-site-$pack
        if [ ! -f "$context/site.tar" ]; then
            log "packing $TORCH_PACKAGES and their requirements from $PY's environment into $context/site.tar (once; ~5 GB)"
            rm -rf "$CACHE"/torch-site-*  # an older pack
            mkdir -p "$context"
            nice -n 10 "$PY" docker/pack_site.py "$context/site.tar.partial" $TORCH_PACKAGES 2>/dev/null >/dev/null
            mv "$context/site.tar.partial" "$context/site.tar"
        fi
        build "$torch_base" "$key" docker/torch.Dockerfile "$context" --build-arg "BASE_IMAGE=$base"
    fi
    key=$(key_of docker/training.Dockerfile runtime/pyproject.toml runtime/training_runtime "$(image_id "$torch_base")")
    fresh training-torch:latest "$key" && { log "training-torch:latest is up to date"; return 0; }
    project_wheels
    build training-torch:latest "$key" docker/training.Dockerfile . --build-arg "BASE_IMAGE=$torch_base"
}

airflow_image() {
    local base key sources ignore=
    if use_registry && { [ -n "$(image_id "$OFFICIAL_AIRFLOW")" ] || docker pull -q "$OFFICIAL_AIRFLOW" >/dev/null; }; then
        base=$OFFICIAL_AIRFLOW
    else
        debian_base
        key=$(key_of docker/airflow-base.Dockerfile "$(image_id "$DEBIAN_IMAGE")")
        base=training-airflow-base:$AIRFLOW_VERSION
        ignore=1  # see IGNORE_REQUIRES_PYTHON in docker/airflow.Dockerfile
        fresh "$base" "$key" || build "$base" "$key" docker/airflow-base.Dockerfile docker \
            --build-arg "BASE_IMAGE=$DEBIAN_IMAGE" --build-arg "AIRFLOW_VERSION=$AIRFLOW_VERSION"
    fi
    sources=(docker/airflow.Dockerfile requirements.txt pyproject.toml operators runtime/pyproject.toml
             runtime/training_runtime dags plugins)
    key=$(key_of "${sources[@]}" "$(image_id "$base")")
    fresh training-airflow:latest "$key" && { log "training-airflow:latest is up to date"; return 0; }
    airflow_wheelhouse
    project_wheels
    build training-airflow:latest "$key" docker/airflow.Dockerfile . --build-arg "AIRFLOW_IMAGE=$base" \
        --build-arg "IGNORE_REQUIRES_PYTHON=$ignore"
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(training torch airflow)
mkdir -p "$CACHE"
for target in "${targets[@]}"; do
    case "$target" in
        training) training_image ;;
        torch) torch_image ;;
        airflow) airflow_image ;;
        *) echo "usage: $0 [training] [torch] [airflow]" >&2; exit 2 ;;
    esac
done
# Earlier builds of our images that a rebuild untagged (only images carrying our label).
docker image prune -f --filter "label=$LABEL" >/dev/null 2>&1 || true
