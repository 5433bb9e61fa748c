#!/usr/bin/env python3
"""The checks of tests/compose/replicas.sh, against docker-compose.replicas.yml.

Run by replicas.sh once the stack is up and healthy; drives compose through
the command in $COMPOSE (a JSON list). A client sends through both replicas
(A and B, their published ports) and every figure is counted and printed.
Exits non-zero on the first failed check.
"""
import concurrent.futures as cf
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter

COMPOSE = json.loads(os.environ["COMPOSE"])
PROJECT = os.environ.get("PROJECT", "keyhole-replicas")
CATALOG = os.environ.get("KEYHOLE_CATALOG", "../shared/catalog")
# The Redis nodes' fixed addresses (docker-compose.replicas.yml): Sentinel
# names a primary by address.
REDIS_NODES = {
    os.environ.get("KEYHOLE_REDIS_PRIMARY_IP", "10.213.77.10"): "redis-primary",
    os.environ.get("KEYHOLE_REDIS_REPLICA_IP", "10.213.77.11"): "redis-replica",
}
REPLICAS = {
    "A": {"llm": int(os.environ.get("KEYHOLE_A_LLM_PORT", 11000)),
          "hms": int(os.environ.get("KEYHOLE_A_HMS_PORT", 11001))},
    "B": {"llm": int(os.environ.get("KEYHOLE_B_LLM_PORT", 12000)),
          "hms": int(os.environ.get("KEYHOLE_B_HMS_PORT", 12001))},
}
# The list and detail samples the demo HMS serves, by path.
SAMPLES = {
    "/api/v2/patients": "01_patients.search.json",
    "/api/v2/appointments": "03_appointments.list.json",
    "/api/v2/visit": "04_visit.detail.json",
    "/api/v2/prescription": "05_prescription.detail.json",
    "/api/v2/task-group": "06_task-group.detail.json",
}
PATIENT = "039b70b8-92f7-44b7-9c91-4e3f0e900c71"  # served at /api/v2/patients/{raw}
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
BUDGET = 12  # the planner phase's most tools (+ keyhole's own tool-search tool)
CATALOG_BODY = open(os.path.join(CATALOG, "openai_request.json"), "rb").read()
REGISTRY = len(json.loads(CATALOG_BODY)["tools"])
RAW = set()
ORIG = {}
for path, f in SAMPLES.items():
    text = open(os.path.join(CATALOG, "hms_samples", f)).read()
    ORIG[path] = json.loads(text)
    RAW.update(u.lower() for u in UUID.findall(text))
for f in os.listdir(os.path.join(CATALOG, "hms_samples")):
    RAW.update(u.lower() for u in UUID.findall(open(os.path.join(CATALOG, "hms_samples", f)).read()))

counts = Counter()
lock = threading.Lock()
# session -> {alias: raw id}: every alias handed out to the client, with the
# raw id the client knows it stands for (the sample it was read from).
handed = {}


def count(key, n=1):
    with lock:
        counts[key] += n


class Fail(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)


def compose(*args, capture=False):
    r = subprocess.run(COMPOSE + list(args), capture_output=True, text=True)
    if r.returncode != 0:
        raise Fail(f"compose {' '.join(args)}: {r.stderr.strip()[-400:]}")
    return r.stdout.strip()


def request(port, method, path, session, body=None, timeout=30):
    """(status, headers, body); status 0 when the connection failed."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"x-keyhole-session": session} if session else {}
    if body is not None:
        headers["content-type"] = "application/json"
    try:
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    except (OSError, http.client.HTTPException):
        return 0, {}, b""
    finally:
        c.close()


def leaks(body):
    """Raw ids of the samples in a body the client received."""
    text = body.decode("utf-8", "replace").lower()
    return [u for u in UUID.findall(text) if u in RAW]


def hms(rep, path, session, method="GET", body=None):
    status, _, got = request(REPLICAS[rep]["hms"], method, path, session, body)
    leaked = leaks(got)
    count("hms requests")
    if leaked:
        count("raw ids leaked", len(leaked))
    return status, got


def pairs(orig, got, out):
    """alias -> raw id, from the sample and its aliased copy walked together."""
    if isinstance(orig, dict) and isinstance(got, dict):
        for k, v in orig.items():
            pairs(v, got.get(k), out)
    elif isinstance(orig, list) and isinstance(got, list):
        for o, g in zip(orig, got):
            pairs(o, g, out)
    elif isinstance(orig, str) and isinstance(got, str) and UUID.fullmatch(orig):
        out[got] = orig.lower()


def mint(rep, session, path):
    """GET a sample through `rep`; records the aliases handed out. Returns the body."""
    status, got = hms(rep, path, session)
    check(status == 200, f"{rep} GET {path} ({session}): {status} {got[:200]!r}")
    m = {}
    pairs(ORIG[path], json.loads(got), m)
    check(m and all(a.lower() not in RAW for a in m), f"{rep} {path}: not aliased")
    with lock:
        known = handed.setdefault(session, {})
        for a, raw in m.items():
            check(known.get(a, raw) == raw, f"{session}: {a} stood for {known.get(a)}, now {raw}")
            known[a] = raw
    count("aliases handed out (incl. repeats)", len(m))
    return got


def decodes(rep, session, aliases):
    """True when `aliases` decode through `rep` to the raw ids the client knows:
    a request body carrying them reaches the HMS (which echoes it) decoded,
    and comes back aliased the same; the patient's alias reaches the HMS at
    the raw id's path."""
    known = handed[session]
    body = json.dumps({"data": [{"id": a} for a in aliases]}).encode()
    status, got = hms(rep, "/api/v2/echo", session, "POST", body)
    if status != 200:
        return False
    # One raw id read under two kinds (a user who is a practitioner) has an
    # alias per kind; coming back, it is aliased as the first: either stands
    # for the same raw id.
    back = [d.get("id") for d in json.loads(got).get("data", [])]
    if len(back) != len(aliases) or any(known.get(b) != known[a] for a, b in zip(aliases, back)):
        return False
    for a in aliases:
        if known[a] == PATIENT:
            status, got = hms(rep, f"/api/v2/patients/{a}", session)
            if status != 200 or json.loads(got)["data"]["id"] != a:
                return False
    return True


def llm(rep, session, timeout=60):
    """(status, source, tools): the catalog request through `rep`'s LLM route."""
    status, headers, got = request(REPLICAS[rep]["llm"], "POST", "/v1/chat/completions",
                                   session, CATALOG_BODY, timeout)
    count("llm requests")
    tools = None
    if status == 200:
        try:
            tools = len(json.loads(got)["tools"])
        except (ValueError, KeyError, TypeError):
            tools = None
        if tools is None or tools > BUDGET + 1 or tools >= REGISTRY:
            count("llm requests over budget")
    return status, headers.get("x-keyhole-source"), tools


def until(what, secs, fn, every=1.0):
    deadline = time.time() + secs
    while True:
        v = fn()
        if v:
            return v
        if time.time() > deadline:
            raise Fail(f"{what}: not within {secs} s")
        time.sleep(every)


def source_is(rep, want):
    status, src, tools = llm(rep, f"replicas-{want}")
    return status == 200 and src == want and tools and tools <= BUDGET + 1


def redis_cli(service, *args, port="6379"):
    return compose("exec", "-T", service, "redis-cli", "-p", port, *args)


def primary():
    """The Redis node Sentinel names primary, by service name (or the address
    it gave, when that is no node's)."""
    out = redis_cli("redis-sentinel-1", "SENTINEL", "get-master-addr-by-name", "keyhole", port="26379")
    addr = out.split("\n")[0]
    return REDIS_NODES.get(addr, addr)


def section(title):
    print(f"== {title}", flush=True)
    return time.time()


def done(start):
    print(f"   ({time.time() - start:.0f} s)", flush=True)


# === 1. one alias space across replicas ===

def cross_replica():
    t = section("an alias minted through A decodes through B; concurrent sessions agree")
    got = mint("A", "cross-1", "/api/v2/patients")
    aliases = sorted(handed["cross-1"])
    check(decodes("B", "cross-1", aliases), "aliases minted through A do not decode through B")
    print(f"   {len(aliases)} aliases minted through A decode through B (echo round trip + patient path)")
    count("aliases decoded across replicas", len(aliases))
    del got
    # Concurrent minting: each session asks for every sample through A and B at once.
    sessions = [f"conc-{i}" for i in range(8)]
    jobs = [(rep, s, p) for s in sessions for p in SAMPLES for rep in ("A", "B")]
    with cf.ThreadPoolExecutor(16) as pool:
        bodies = list(pool.map(lambda j: (j, mint(*j)), jobs))
    by = {}
    for (rep, s, p), body in bodies:
        by.setdefault((s, p), {})[rep] = body
    differ = sum(1 for v in by.values() if v["A"] != v["B"])
    count("concurrent A/B answers compared", len(by))
    count("concurrent A/B answers that differ", differ)
    check(differ == 0, f"{differ} of {len(by)} answers differ between A and B")
    n = sum(len(handed[s]) for s in sessions)
    print(f"   {len(jobs)} requests, {len(sessions)} sessions minted concurrently through A and B: "
          f"{len(by)} answers compared, {differ} differ; {n} distinct aliases")
    done(t)


# === 2. Redis primary killed ===

def redis_failover():
    t = section("every alias handed out survives killing the Redis primary")
    for i in range(6):
        for p in SAMPLES:
            mint("AB"[i % 2], f"fo-{i}", p)
    total = sum(len(v) for v in handed.values())
    before = primary()
    check(before == "redis-primary", f"Sentinel names {before!r} primary, want redis-primary")
    killed = time.time()
    compose("kill", "redis-primary")
    # Meanwhile the client keeps asking: answers are aliased or refused.
    statuses = Counter()
    def promoted():
        st, _ = hms("AB"[len(statuses) % 2], "/api/v2/patients", "fo-0")
        statuses[st] += 1
        return primary() == "redis-replica"
    until("Sentinel promotes redis-replica", 120, promoted, every=0.5)
    print(f"   redis-replica promoted {time.time() - killed:.1f} s after the kill; "
          f"answers meanwhile: {dict(statuses)}")
    # The promoted primary's records, compared with what the client was told.
    mismatched = 0
    for s, m in handed.items():
        lines = redis_cli("redis-replica", "HGETALL", f"keyhole:{s}:e").splitlines()
        records = dict(zip(lines[0::2], lines[1::2]))
        for a, u in m.items():
            if a not in records or u not in records[a].lower():
                mismatched += 1
    # With one replica, the promoted primary has none: every HMS answer
    # (aliases must be acknowledged) is refused until the old primary is back
    # as its replica.
    refused = Counter(hms(r, "/api/v2/patients", "fo-0")[0] for r in "AB")
    check(not refused.get(200), f"answered with no replica to acknowledge: {dict(refused)}")
    compose("start", "redis-primary")
    until("redis-primary replicates the new primary", 60,
          lambda: "state=online" in redis_cli("redis-replica", "INFO", "replication"))
    until("HMS answers through A and B again", 30,
          lambda: all(hms(r, "/api/v2/patients", "fo-0")[0] == 200 for r in "AB"), every=0.5)
    print(f"   no replica left: HMS refused ({dict(refused)}); redis-primary back as a replica "
          f"{time.time() - killed:.1f} s after the kill")
    lost = 0
    checked = 0
    for rep in ("A", "B"):
        for s, m in handed.items():
            aliases = sorted(m)
            ok = until(f"{s} decodes through {rep}", 30, lambda: decodes(rep, s, aliases), every=0.5)
            checked += len(aliases)
            lost += 0 if ok else len(aliases)
    count("aliases checked after failover", checked)
    count("aliases lost", lost + mismatched)
    check(lost == 0 and mismatched == 0, f"{lost} aliases no longer decode, {mismatched} stored differently")
    print(f"   {total} aliases in {len(handed)} sessions: each decodes through A and B to the same raw id "
          f"({checked} checks), and the promoted primary holds each: 0 lost")
    mint("A", "fo-new", "/api/v2/patients")
    mint("B", "fo-new", "/api/v2/appointments")
    print("   minting through A and B again")
    done(t)


# === 3. Qdrant nodes stopped ===

def qdrant_nodes():
    t = section("Qdrant: one node stopped -> retrieval; two -> bounded fallback; back -> retrieval")
    for rep in "AB":
        until(f"{rep} ranks with retrieval", 300, lambda: source_is(rep, "retrieval"), every=2)
    started = {c: compose("ps", "-q", c) for c in ("control-a", "control-b")}
    starts = {c: subprocess.run(["docker", "inspect", "-f", "{{.State.StartedAt}}", i],
                                capture_output=True, text=True).stdout for c, i in started.items()}
    compose("stop", "qdrant-2")
    sources = Counter()
    for i in range(10):
        for rep in "AB":
            st, src, tools = llm(rep, "replicas-retrieval")
            check(st == 200, f"{rep}: LLM status {st}")
            sources[src] += 1
    print(f"   qdrant-2 stopped: {dict(sources)} in 20 turns through A and B")
    count("turns with one Qdrant node stopped", 20)
    count("turns with one node stopped not retrieval", 20 - sources["retrieval"])
    check(sources["retrieval"] == 20, f"one node stopped: {dict(sources)}")
    compose("stop", "qdrant-3")
    for rep in "AB":
        until(f"{rep} falls back", 90, lambda: source_is(rep, "control-fallback"), every=2)
    sources = Counter()
    for i in range(5):
        for rep in "AB":
            st, src, tools = llm(rep, "replicas-fallback")
            sources[src] += 1
            check(st == 200 and tools and tools <= BUDGET + 1, f"{rep}: {st}, {tools} tools")
    print(f"   qdrant-2 and -3 stopped: {dict(sources)} in 10 turns, each within {BUDGET} tools")
    compose("start", "qdrant-2", "qdrant-3")
    for rep in "AB":
        until(f"{rep} ranks with retrieval again", 300, lambda: source_is(rep, "retrieval"), every=2)
    now = {c: subprocess.run(["docker", "inspect", "-f", "{{.State.StartedAt}}", i],
                             capture_output=True, text=True).stdout for c, i in started.items()}
    check(now == starts, "a control was restarted")
    print("   nodes back: retrieval through A and B, neither control restarted")
    done(t)


# === 4. B cut off from Redis ===

def b_cut_off():
    t = section("B cut off from Redis: refuses HMS traffic, never a raw id, never mints")
    net = f"{PROJECT}_redis"
    cb = compose("ps", "-q", "control-b")
    subprocess.run(["docker", "network", "disconnect", net, cb], check=True)
    statuses = Counter()
    cut = time.time()
    try:
        for i in range(4):
            for p in SAMPLES:
                for s in ("cut-new", "conc-0"):
                    st, got = hms("B", p, s)
                    statuses[st] += 1
                    if st == 200:
                        count("B answered while cut off")
        st, src, _ = llm("B", "replicas-cut")
        per = (time.time() - cut) / (sum(statuses.values()) + 1)
        print(f"   B while cut off: HMS statuses {dict(statuses)} ({per:.1f} s each: the alias "
              f"store's deadline); its LLM route: {st} {src}")
    finally:
        subprocess.run(["docker", "network", "connect", net, cb], check=True)
    refused = statuses[502] + statuses[503]
    count("HMS requests refused by B while cut off", refused)
    check(refused == sum(statuses.values()), f"B answered while cut off: {dict(statuses)}")
    # Nothing was minted for the new session: A starts it from its first alias.
    got = mint("A", "cut-new", "/api/v2/patients")
    first = json.loads(got)["data"][0]["id"]
    check(first.endswith("-001"), f"cut-new's first patient alias is {first}: B minted while cut off")
    back = time.time()
    until("B serves again", 60, lambda: hms("B", "/api/v2/patients", "cut-new")[0] == 200, every=0.2)
    print(f"   B answers again {time.time() - back:.1f} s after A minted (B reconnected before)")
    check(hms("B", "/api/v2/patients", "cut-new")[1] == got, "B and A disagree after reconnecting")
    print("   reconnected: B serves again, with A's aliases; nothing minted while cut off")
    done(t)


# === 5. control of A killed under load ===

def a_control_killed():
    t = section("control of A killed under load")
    stop = threading.Event()
    seen = Counter()
    def load(rep, route, n):
        i = 0
        while not stop.is_set():
            i += 1
            phase = "killed" if killed.is_set() else "before"
            if route == "llm":
                st, src, tools = llm(rep, f"load-{rep}-{n}")
                seen[(rep, route, phase, st, src)] += 1
            else:
                s = f"load-{rep}-{n}"
                st, got = hms(rep, "/api/v2/patients", s)
                seen[(rep, route, phase, st, None)] += 1
                if st == 200:
                    m = {}
                    pairs(ORIG["/api/v2/patients"], json.loads(got), m)
                    with lock:
                        handed.setdefault(s, {}).update(m)
    killed = threading.Event()
    threads = [threading.Thread(target=load, args=(rep, route, n))
               for rep in "AB" for route in ("llm", "hms") for n in range(2)]
    for th in threads:
        th.start()
    time.sleep(5)
    compose("kill", "control-a")
    killed.set()
    time.sleep(15)
    stop.set()
    for th in threads:
        th.join()
    for k in sorted(seen, key=str):
        print(f"   {k[0]} {k[1]:<3} {k[2]:<6} status {k[3]} {k[4] or '':<16} x{seen[k]}")
    def of(rep, route, phase):
        return {(k[3], k[4]): v for k, v in seen.items() if k[:3] == (rep, route, phase)}
    a_llm, a_hms = of("A", "llm", "killed"), of("A", "hms", "killed")
    b_llm, b_hms = of("B", "llm", "killed"), of("B", "hms", "killed")
    # The LLM route with aliases on (compose's filter configuration) refuses
    # a request with a session while control is down (the prompt may carry
    # aliases it cannot check); an answer is a bounded set (counted by llm()).
    check(a_llm and all((st == 200 and src in ("filter-fallback", "control-fallback", "retrieval", "lexical"))
                        or st in (502, 503) for st, src in a_llm), f"A's LLM route: {a_llm}")
    a_hms_ok = sum(v for (st, _), v in a_hms.items() if st == 200)
    a_hms_refused = sum(v for (st, _), v in a_hms.items() if st in (502, 503))
    check(a_hms_refused > 0 and a_hms_refused + a_hms_ok == sum(a_hms.values()), f"A's HMS route: {a_hms}")
    check(all(st == 200 for st, _ in b_llm) and all(st == 200 for st, _ in b_hms),
          f"B: LLM {b_llm}, HMS {b_hms}")
    count("A HMS requests refused (control down)", a_hms_refused)
    count("A LLM requests answered by the filter's fallback",
          sum(v for (st, src), v in a_llm.items() if src == "filter-fallback"))
    count("A LLM requests refused (control down)", sum(v for (st, _), v in a_llm.items() if st != 200))
    count("B requests served while A's control was down", sum(b_llm.values()) + sum(b_hms.values()))
    compose("start", "control-a")
    until("control-a healthy", 120, lambda: subprocess.run(
        ["docker", "inspect", "-f", "{{.State.Health.Status}}", compose("ps", "-q", "control-a")],
        capture_output=True, text=True).stdout.strip() == "healthy")
    lost = 0
    for s in [s for s in handed if s.startswith("load-")]:
        aliases = sorted(handed[s])
        for rep in "AB":
            if not until(f"{s} decodes through {rep}", 30, lambda: decodes(rep, s, aliases)):
                lost += len(aliases)
    count("aliases lost", lost)
    print(f"   control-a back: every alias of the load sessions decodes through A and B")
    done(t)


def main():
    parts = [cross_replica, redis_failover, qdrant_nodes, b_cut_off, a_control_killed]
    only = os.environ.get("REPLICAS_ONLY")
    if only:
        parts = [p for p in parts if p.__name__ in only.split(",")]
    try:
        for p in parts:
            p()
    finally:
        print("== figures")
        for k in sorted(counts):
            print(f"   {k}: {counts[k]}")
    check(counts["raw ids leaked"] == 0, f"{counts['raw ids leaked']} raw ids leaked")
    check(counts["llm requests over budget"] == 0, f"{counts['llm requests over budget']} LLM requests over budget")
    check(counts["aliases lost"] == 0, "aliases lost")


if __name__ == "__main__":
    try:
        main()
    except Fail as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)
