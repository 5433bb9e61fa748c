#!/usr/bin/env python3
"""Prints the markdown tables of RESULTS.md from results.json (written by `keyhole eval --out`).

Usage: python3 eval/tables.py [eval/results.json]
"""
import json
import sys

ORDER = ["field", "catalog", "apibank", "metatool", "bfcl", "stabletoolbench", "sealtools"]
MODES = ["hybrid", "fitted", "cosine", "rrf", "lexical", "clauses", "fittedclauses"]
# Each post-fusion stage switched in turn (dedup, off by default, on) (`--mode ablation`), then plain RRF.
ABLATION = ["no-threshold", "no-domain", "with-dedup", "no-workflow", "no-budget", "no-floors",
            "no-patient-floor", "no-embedder-top", "no-clauses"]


def key(m):
    d = ORDER.index(m["dataset"]) if m["dataset"] in ORDER else len(ORDER)
    return (d, MODES.index(m["mode"]) if m["mode"] in MODES else len(MODES))


def margin(m):
    return "none" if m.get("budgetMargin") is None else f"{m['budgetMargin']:.3f}"


def leaked(m):
    return f"{m['forbiddenSurfaced']}/{m['queriesWithForbidden']}" if m["queriesWithForbidden"] else "–"


def ablation(rows):
    """The check-part ablation: the engine, each stage off in turn, plain RRF; deltas against hybrid."""
    by = {(r["dataset"], r["mode"]): r for r in rows if r["part"] == "check"}
    sets = sorted({d for d, _ in by}, key=lambda d: ORDER.index(d) if d in ORDER else len(ORDER))
    print("| dataset | mode | full-gold recall | Δ full-gold | recall@10 | Δ recall@10 | mean surfaced | research leaked |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for d in sets:
        base = by.get((d, "hybrid"))
        if not base or not any((d, a) in by for a in ABLATION):
            continue
        for mode in ["hybrid"] + ABLATION + ["rrf"]:
            m = by.get((d, mode))
            if not m:
                continue
            df = m["fullGoldRecall"] - base["fullGoldRecall"]
            dr = m["recallAtK"] - base["recallAtK"]
            delta = (lambda x: "" if mode == "hybrid" else f"{x:+.3f}")
            print(f"| {d} | {mode} | {m['fullGoldRecall']:.3f} | {delta(df)} | {m['recallAtK']:.3f} | {delta(dr)} | "
                  f"{m['meanSurfaced']:.2f} | {leaked(m)} |")
    print()


def main():
    rows = json.load(open(sys.argv[1] if len(sys.argv) > 1 else "eval/results.json"))
    ablation(rows)
    rows = [r for r in rows if r["mode"] in MODES]
    by = {(r["dataset"], r["mode"], r["part"]): r for r in rows}
    check = sorted((r for r in rows if r["part"] == "check"), key=key)
    print("| dataset | mode | margin | check queries | full-gold recall | recall@10 | MRR | nDCG@10 | mean surfaced | research tools leaked |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m in check:
        print(f"| {m['dataset']} | {m['mode']} | {margin(m)} | {m['queries']} | {m['fullGoldRecall']:.3f} | {m['recallAtK']:.3f} | "
              f"{m['mrr']:.3f} | {m['ndcgAt10']:.3f} | {m['meanSurfaced']:.2f} | {leaked(m)} |")
    print()
    print("| dataset | mode | tune queries | full-gold recall | recall@10 | mean surfaced | research leaked | gap full-gold (tune − check) | gap recall@10 (tune − check) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for c in check:
        t = by.get((c["dataset"], c["mode"], "tune"))
        if not t:
            continue
        print(f"| {t['dataset']} | {t['mode']} | {t['queries']} | {t['fullGoldRecall']:.3f} | {t['recallAtK']:.3f} | "
              f"{t['meanSurfaced']:.2f} | {leaked(t)} | {t['fullGoldRecall'] - c['fullGoldRecall']:+.3f} | "
              f"{t['recallAtK'] - c['recallAtK']:+.3f} |")
    print()
    print("| dataset | mode | fitted margin | margins by fold | CV full-gold recall (tune) | CV mean surfaced (tune) | tune recall uncut |")
    print("|---|---|---:|---|---:|---:|---:|")
    for c in check:
        f = c.get("fit")
        if not f:
            continue
        folds = ", ".join("none" if x is None else f"{x:.3f}" for x in f["foldMargins"])
        print(f"| {c['dataset']} | {c['mode']} | {margin(c)} | {folds} | {f['cvFullGoldRecall']:.3f} | "
              f"{f['cvMeanSurfaced']:.2f} | {f['tuneRecallUncut']:.3f} |")


if __name__ == "__main__":
    main()
