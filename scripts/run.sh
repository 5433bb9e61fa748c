#!/usr/bin/env bash
# Runs the sidecar on its embedded defaults, in the foreground, until Ctrl-C:
# embedder, control, Envoy, and (unless both upstreams are set) the demo upstreams.
# Envoy logs at warning, keyhole's own filter lines at info, on this terminal; the
# embedder, control and the demo upstreams log to $RUN_DIR/logs/.
#
#   LLM_UPSTREAM=host:port   send LLM calls there (plain HTTP) instead of the local echo
#   LLM_PROVIDER=openai|anthropic|HOST
#                            send LLM calls to a real provider over TLS (api.openai.com,
#                            api.anthropic.com, or any HOST:443); credentials pass through
#   HMS_UPSTREAM=host:port   send HMS calls there instead of the demo HMS
#   LLM_PORT / HMS_PORT / ADMIN_PORT   listener ports (default 10000 / 10001 / 9901)
#   DEMO_LLM_PORT / DEMO_HMS_PORT      demo upstream ports (default 18080 / 18081; a free
#                            port when the default is taken)
#   KEYHOLE_TAXONOMY=FILE    alias taxonomy (JSON, e.g. config/taxonomy.example.json): control
#                            reads it (--taxonomy) and envoy/render.py puts it into both filter
#                            configurations, so both sides run the same one
#   ENVOY_LOG_LEVEL / ENVOY_COMPONENT_LOG_LEVEL   Envoy's --log-level (default warning) and
#                            --component-log-level (default wasm:info: keyhole's lines)
set -euo pipefail
# Absolute before the cd: a relative path is relative to where make was run.
[ -z "${KEYHOLE_TAXONOMY:-}" ] || export KEYHOLE_TAXONOMY=$(realpath -e "$KEYHOLE_TAXONOMY")
[ -z "${RUN_DIR:-}" ] || export RUN_DIR=$(realpath -m "$RUN_DIR")
cd "$(dirname "$0")/.."
ROOT=$(pwd)
RUN=${RUN_DIR:-$ROOT/.run}
LOGS=$RUN/logs
mkdir -p "$LOGS"
# The embedder (the only service the embedded default needs: no Qdrant, no
# Redis) runs under with-services.sh, which calls this script again.
if [ -z "${KEYHOLE_EMBEDDER_URL:-}" ]; then
  echo "starting the embedder (log: $LOGS/embedder.log)..."
  KEYHOLE_SERVICES=embedder KEYHOLE_SERVICES_LOG_DIR=$LOGS exec scripts/with-services.sh "$0" "$@"
fi
export LISTEN_ADDRESS=${LISTEN_ADDRESS:-127.0.0.1} LLM_PORT=${LLM_PORT:-10000} HMS_PORT=${HMS_PORT:-10001} ADMIN_PORT=${ADMIN_PORT:-9901}
CATALOG=$(realpath -m "${KEYHOLE_CATALOG:-$ROOT/../shared/catalog}")

pids=()
cleanup() {
  trap - EXIT INT TERM
  echo; echo "stopping keyhole..."
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

# The port asked for when nothing listens on it, else a free one (0: any free one).
port_or_free() {
  python3 - "$1" <<'PY'
import socket, sys
port = int(sys.argv[1])
s = socket.socket()
try:
    s.bind(("127.0.0.1", port))
except OSError:
    s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
PY
}

case "${LLM_PROVIDER:-}" in
  "") export LLM_CLUSTER=llm_upstream LLM_TLS_HOST=api.openai.com ;;
  openai) export LLM_CLUSTER=llm_provider_tls LLM_TLS_HOST=api.openai.com ;;
  anthropic) export LLM_CLUSTER=llm_provider_tls LLM_TLS_HOST=api.anthropic.com ;;
  *) export LLM_CLUSTER=llm_provider_tls LLM_TLS_HOST=$LLM_PROVIDER ;;
esac
export CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

if [ -z "${LLM_UPSTREAM:-}" ] || [ -z "${HMS_UPSTREAM:-}" ]; then
  samples=()
  [ -d "$CATALOG/hms_samples" ] && samples=(--hms-samples "$CATALOG/hms_samples")
  DEMO_LLM_PORT=$(port_or_free "${DEMO_LLM_PORT:-18080}")
  DEMO_HMS_PORT=$(port_or_free "${DEMO_HMS_PORT:-18081}")
  while [ "$DEMO_HMS_PORT" = "$DEMO_LLM_PORT" ]; do DEMO_HMS_PORT=$(port_or_free 0); done
  target/release/keyhole-demo --llm "127.0.0.1:$DEMO_LLM_PORT" --hms "127.0.0.1:$DEMO_HMS_PORT" "${samples[@]}" \
    >"$LOGS/demo.log" 2>&1 &
  pids+=($!)
fi
LLM_UPSTREAM=${LLM_UPSTREAM:-127.0.0.1:${DEMO_LLM_PORT:-18080}}
HMS_UPSTREAM=${HMS_UPSTREAM:-127.0.0.1:${DEMO_HMS_PORT:-18081}}
export LLM_UPSTREAM_HOST=${LLM_UPSTREAM%:*} LLM_UPSTREAM_PORT=${LLM_UPSTREAM##*:}
export HMS_UPSTREAM_HOST=${HMS_UPSTREAM%:*} HMS_UPSTREAM_PORT=${HMS_UPSTREAM##*:}
export KEYHOLE_SOCKET=$RUN/control.sock
export KEYHOLE_WASM=$ROOT/target/wasm32-wasip1/wasm-release/keyhole_filter.wasm
export MAX_BODY_BYTES=${MAX_BODY_BYTES:-4194304}
export LLM_FILTER_CONFIG=${LLM_FILTER_CONFIG:-'{"mode":"llm","timeout_ms":30000}'}
export HMS_FILTER_CONFIG=${HMS_FILTER_CONFIG:-'{"mode":"hms","timeout_ms":5000}'}

# The catalog's metadata overlay (categories, retrieval descriptions, keywords,
# patient requirements) when the catalog is there; keyhole works without one.
# The registry the demo request carries is indexed at start, so the first turn
# is hybrid (control's /healthz answers 503 until then; the wait is bounded).
overlay=()
[ -f "$CATALOG/tools.json" ] && overlay=(--overlay "$CATALOG/tools.json")
registry=()
[ -f "$CATALOG/openai_request.json" ] && registry=(--registry "$CATALOG/openai_request.json")
# One taxonomy file for both sides: checked here (a bad file stops the run with
# the field at fault), read by control, inlined into the filter configurations
# by render.py from the same variable.
taxonomy=()
if [ -n "${KEYHOLE_TAXONOMY:-}" ]; then
  target/release/keyhole config check --taxonomy "$KEYHOLE_TAXONOMY"
  taxonomy=(--taxonomy "$KEYHOLE_TAXONOMY")
fi
echo "starting control (log: $LOGS/control.log)..."
NO_COLOR=1 target/release/keyhole serve --socket "$KEYHOLE_SOCKET" --data-dir "$RUN/data" "${overlay[@]}" "${registry[@]}" "${taxonomy[@]}" \
  >"$LOGS/control.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do [ -S "$KEYHOLE_SOCKET" ] && break; sleep 0.1; done
echo "indexing the catalog registry (control reports ready when done)..."
for _ in $(seq 1 600); do
  target/release/keyhole health --socket "$KEYHOLE_SOCKET" >/dev/null 2>&1 && break
  kill -0 "${pids[-1]}" 2>/dev/null || { tail -n 20 "$LOGS/control.log" >&2; echo "control stopped" >&2; exit 1; }
  sleep 0.5
done
envoy/render.py envoy/envoy.yaml.tmpl >"$RUN/envoy.yaml"
echo "starting Envoy (warnings and keyhole's lines below)..."
.venv/bin/envoy -c "$RUN/envoy.yaml" --disable-hot-restart --concurrency 2 \
  --log-level "${ENVOY_LOG_LEVEL:-warning}" --component-log-level "${ENVOY_COMPONENT_LOG_LEVEL:-wasm:info}" &
pids+=($!)
for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$ADMIN_PORT/ready" >/dev/null 2>&1 && break; sleep 0.1; done
cat <<MSG

keyhole is running.
  LLM listener:  http://127.0.0.1:$LLM_PORT   → ${LLM_PROVIDER:+https://$LLM_TLS_HOST}${LLM_PROVIDER:-$LLM_UPSTREAM}
  HMS listener:  http://127.0.0.1:$HMS_PORT   → $HMS_UPSTREAM
  Envoy admin:   http://127.0.0.1:$ADMIN_PORT/stats?filter=wasmcustom.keyhole
  control:       $KEYHOLE_SOCKET
  logs:          $LOGS (control.log, embedder.log, demo.log); Envoy and keyhole's filter below

Send the catalog request (the answer is what the model would have received: about a dozen tools of 108):
  curl -s http://127.0.0.1:$LLM_PORT/v1/chat/completions -H 'content-type: application/json' \\
       -H 'x-keyhole-session: demo' --data-binary @$CATALOG/openai_request.json -D - | head -c 2000

Read patients from the HMS (every record id comes back as a session alias):
  curl -s http://127.0.0.1:$HMS_PORT/api/v2/patients -H 'x-keyhole-session: demo' -D - | head -c 1500

Press Ctrl-C to stop.
MSG
wait -n "${pids[@]}"
