#!/usr/bin/env python3
"""Send labelled turns through a running keyhole and count what the model would be offered.

Each turn goes to the LLM listener as the user message of the catalog's OpenAI request (108
tools), in a session of its own, one at a time; the echo LLM of `make run` sends the body back as
keyhole forwarded it, and the registry tools in it are the turn's surfaced set (the control tool
`keyhole_tool_search` is not counted; `a__b` in the request is the catalog's `a.b`). Figures per part, split as `keyhole eval` splits
(`control/src/eval.rs`, `Part::of`): full-gold (every gold tool surfaced), recall, mean surfaced,
and forbidden tools surfaced (research tools on "find the patient" turns).

    make run &    # or scripts/run.sh; LLM listener on :10000
    python3 eval/live.py --queries ../shared/catalog/queries.field.jsonl --name field

Only the standard library: it runs beside any keyhole, local or in compose.
"""

import argparse
import hashlib
import json
import sys
import urllib.error
import urllib.request

CONTROL_TOOLS = {"keyhole_tool_search"}


def part_of(query_id: str) -> str:
    """The tune/check split of `keyhole eval`: the first two bytes of
    sha256("keyhole-split-v1\\0" + id), big-endian, modulo 100, below 35 is check."""
    digest = hashlib.sha256(b"keyhole-split-v1\0" + query_id.encode()).digest()
    return "check" if int.from_bytes(digest[:2], "big") % 100 < 35 else "tune"


def tool_name(tool: dict) -> str:
    """A tool's catalog id: the request names `patient.search.exact` as
    `patient__search__exact` (OpenAI function names allow no dots)."""
    function = tool.get("function")
    return (function or tool).get("name", "").replace("__", ".")


def surfaced(url: str, request: dict, turn: str, session: str, timeout: float) -> list:
    body = json.loads(json.dumps(request))
    users = [m for m in body["messages"] if m.get("role") == "user"]
    users[-1]["content"] = turn
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "x-keyhole-session": session},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        echoed = json.loads(resp.read())
    return [n for n in map(tool_name, echoed.get("tools", [])) if n not in CONTROL_TOOLS]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:10000/v1/chat/completions")
    ap.add_argument("--request", default="../shared/catalog/openai_request.json")
    ap.add_argument("--queries", required=True)
    ap.add_argument("--name", required=True, help="the set's name in the output")
    ap.add_argument("--session-prefix", default="live", help="sessions are PREFIX-NAME-ID")
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--misses", help="write the tune part's misses there (JSON lines); "
                    "the check part's are not listed, as in `keyhole eval`")
    ap.add_argument("--out", help="append the figures there (JSON lines)")
    args = ap.parse_args()

    with open(args.request) as f:
        request = json.load(f)
    with open(args.queries) as f:
        queries = [json.loads(line) for line in f if line.strip()]

    parts = {}
    misses = []
    for q in queries:
        session = f"{args.session_prefix}-{args.name}-{q['id']}"
        try:
            names = surfaced(args.url, request, q["query"], session, args.timeout)
        except (urllib.error.URLError, OSError, ValueError) as e:
            print(f"{q['id']}: no answer from {args.url}: {e}", file=sys.stderr)
            return 2
        gold = set(q["gold"])
        found = gold & set(names)
        p = parts.setdefault(part_of(q["id"]), {"n": 0, "full": 0, "recall": 0.0,
                                                 "surfaced": 0, "forbidden": 0})
        p["n"] += 1
        p["full"] += found == gold
        p["recall"] += len(found) / len(gold) if gold else 1.0
        p["surfaced"] += len(names)
        p["forbidden"] += bool(set(q.get("forbidden", [])) & set(names))
        if found != gold and part_of(q["id"]) == "tune":
            misses.append({"id": q["id"], "query": q["query"], "missing": sorted(gold - found),
                           "surfaced": names})

    rows = []
    for part in ("tune", "check"):
        p = parts.get(part)
        if not p:
            continue
        row = {"name": args.name, "part": part, "n": p["n"],
               "full_gold": round(p["full"] / p["n"], 3),
               "recall": round(p["recall"] / p["n"], 3),
               "mean_surfaced": round(p["surfaced"] / p["n"], 2),
               "forbidden_turns": p["forbidden"]}
        rows.append(row)
        print(json.dumps(row))
    if args.out:
        with open(args.out, "a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    if args.misses:
        with open(args.misses, "w") as f:
            for m in misses:
                f.write(json.dumps(m, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
