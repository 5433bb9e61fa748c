#!/usr/bin/env bash
# End to end through `docker compose`: builds and starts the stack, runs the
# same checks as the process-level tests against it, and tears it down.
# Needs a Docker engine; where there is none it says so and exits 0, unless
# REQUIRE_DOCKER=1 (then it fails).
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! docker info >/dev/null 2>&1; then
  echo "tests/compose/e2e.sh: no Docker engine here; skipped (set REQUIRE_DOCKER=1 to fail instead)"
  [ "${REQUIRE_DOCKER:-0}" = 1 ] && exit 1
  exit 0
fi
CATALOG=${KEYHOLE_CATALOG:-../shared/catalog}
export KEYHOLE_CATALOG=$CATALOG
trap 'docker compose down -v --remove-orphans' EXIT
docker compose up -d --build --wait --wait-timeout 600

echo "check: the catalog request reaches the LLM with 1..12 tools, each byte-identical"
curl -fsS http://127.0.0.1:10000/v1/chat/completions -H 'content-type: application/json' \
  -H 'x-keyhole-session: compose' --data-binary @"$CATALOG/openai_request.json" -o /tmp/keyhole-compose-llm.json
python3 - "$CATALOG/openai_request.json" /tmp/keyhole-compose-llm.json <<'PY'
import json, sys
orig = json.load(open(sys.argv[1])); got = json.load(open(sys.argv[2]))
tools = got["tools"]
assert 1 <= len(tools) <= 12, len(tools)
canon = {json.dumps(t, sort_keys=True) for t in orig["tools"]}
assert all(json.dumps(t, sort_keys=True) in canon for t in tools)
assert {k: v for k, v in got.items() if k != "tools"} == {k: v for k, v in orig.items() if k != "tools"}
print(f"ok: {len(tools)} tools")
PY

echo "check: an HMS response carries no raw id"
curl -fsS http://127.0.0.1:10001/api/v2/patients -H 'x-keyhole-session: compose' -o /tmp/keyhole-compose-hms.json
python3 - "$CATALOG/hms_samples/01_patients.search.json" /tmp/keyhole-compose-hms.json <<'PY'
import re, sys
orig = open(sys.argv[1]).read(); got = open(sys.argv[2]).read()
uuids = set(re.findall(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", orig))
leaked = [u for u in uuids if u in got]
assert not leaked, leaked
print(f"ok: {len(uuids)} ids aliased")
PY

echo "check: metrics"
curl -fsS 'http://127.0.0.1:9901/stats?filter=keyhole' | grep -q 'keyhole.requests'
echo "compose e2e passed"
