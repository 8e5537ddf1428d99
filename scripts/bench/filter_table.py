#!/usr/bin/env python3
"""filter_table.py LOG [LOG...] [--selector batch]

Markdown tables from the logs of scripts/bench/filter_vs_faiss.sh: one table
per dataset and nprobe, one row per filter, with

  filter, kind (random = category, sorted = ts, correlated = region),
  selectivity, parqivf's planner choices (from the flat --preload all batch
  run), then "recall / full-answers / QPS" for each parqivf index and mode
  (flat: all batch, all single, warm single; rabitq4: all batch, all single,
  codes batch, codes single, warm single), FAISS IVF-Flat + IDSelector batch
  and single, and the QPS ratios parqivf ÷ FAISS of like with like: flat
  all batch ÷ FAISS batch, flat all single ÷ FAISS single, flat warm single ÷
  FAISS single.

Recall is hits / Σ min(10, matching rows) over queries; full-answers the
fraction of queries that got min(10, matching rows) hits. A parqivf run that
failed shows "error". Lines it reads: `filter DATASET {json}`,
`parqivf DATASET FILTER INDEX MODE NPROBE {json}`, `faiss {json}`.
"""
import argparse
import json
from collections import defaultdict

MODES = [("flat", "all-batch"), ("flat", "all-single"), ("flat", "warm-single"),
         ("rabitq4", "all-batch"), ("rabitq4", "all-single"), ("rabitq4", "codes-batch"),
         ("rabitq4", "codes-single"), ("rabitq4", "warm-single")]
RATIOS = [(("flat", "all-batch"), "batch"), (("flat", "all-single"), "single"), (("flat", "warm-single"), "single")]
# --compact: the default index (rabitq4) in its three serving modes.
COMPACT_MODES = [("rabitq4", "all-batch"), ("rabitq4", "codes-single"), ("rabitq4", "warm-single")]
COMPACT_RATIOS = [(("rabitq4", "all-batch"), "batch"), (("rabitq4", "codes-single"), "single")]


def cell(r):
    if r is None:
        return "–"
    if "error" in r:
        return "error"
    full = r.get("full-answers")
    full = "?" if full is None else f"{full:.3f}"
    return f"{r['recall']:.3f} / {full} / {r['qps']:,.0f}"


def plans(r):
    if not r or "plans" not in r:
        return "–"
    return " ".join(f"{k} {v}" for k, v in sorted(r["plans"].items()) if v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--selector", default="batch", help="FAISS selector rows to show (batch or bitmap)")
    ap.add_argument("--compact", action="store_true", help="only the default index (rabitq4): preload all batch, preload codes single, storage single")
    a = ap.parse_args()
    modes, ratios = (COMPACT_MODES, COMPACT_RATIOS) if a.compact else (MODES, RATIOS)
    plan_of = ("rabitq4", "all-batch") if a.compact else ("flat", "all-batch")
    filters = defaultdict(dict)   # dataset -> name -> entry (file order kept)
    pq = {}                       # (dataset, filter, nprobe, index, mode) -> summary
    fa = {}                       # (dataset, filter, nprobe, mode) -> row
    nprobes = defaultdict(set)
    for path in a.logs:
        with open(path) as f:
            for line in f:
                line = line.rstrip("\n")
                if line.startswith("filter "):
                    _, ds, js = line.split(" ", 2)
                    e = json.loads(js)
                    filters[ds][e["name"]] = e
                elif line.startswith("parqivf "):
                    parts = line.split(" ", 6)
                    if len(parts) < 7 or not parts[6].startswith("{"):
                        continue
                    _, ds, name, index, mode, np_, js = parts
                    pq[(ds, name, int(np_), index, mode)] = json.loads(js)
                    nprobes[ds].add(int(np_))
                elif line.startswith("faiss "):
                    r = json.loads(line[6:])
                    if "filter" not in r or r.get("selector", "batch") != a.selector:
                        continue
                    fa[(r["dataset"], r["filter"], r["nprobe"], r["mode"])] = r
                    filters[r["dataset"]].setdefault(r["filter"], dict(
                        name=r["filter"], kind=r["kind"], selectivity=r["selectivity"]))
                    nprobes[r["dataset"]].add(r["nprobe"])
    for ds, entries in filters.items():
        # FAISS at a larger nprobe than any parqivf run (its nlist: the exact
        # filtered answer), shown beside every table as the equal-recall peer.
        pq_nprobes = {k[2] for k in pq if k[0] == ds}
        fa_nprobes = {k[2] for k in fa if k[0] == ds}
        wide = max(fa_nprobes - pq_nprobes, default=None) if a.compact else None
        for np_ in sorted(pq_nprobes or nprobes[ds]):
            print(f"\n### {ds}, nprobe {np_}, k 10, 1 thread (recall / full-answers / QPS)\n")
            head = ["filter", "kind", "selectivity", f"plans ({plan_of[0]} {plan_of[1]})"]
            head += [f"{i} {m}" for i, m in modes]
            head += ["FAISS batch", "FAISS single"]
            head += [f"{i} {m} ÷ FAISS {fm}" for (i, m), fm in ratios]
            if wide:
                head += [f"FAISS batch, nprobe {wide}", f"FAISS single, nprobe {wide}"]
                head += [f"{i} {m} ÷ FAISS {fm} nprobe {wide}" for (i, m), fm in ratios]
            print("| " + " | ".join(head) + " |")
            print("|" + "---|" * len(head))
            for name, e in entries.items():
                row = [name, e["kind"], f"{100 * e['selectivity']:.3g} %",
                       plans(pq.get((ds, name, np_) + plan_of))]
                row += [cell(pq.get((ds, name, np_, i, m))) for i, m in modes]
                row += [cell(fa.get((ds, name, np_, fm))) for fm in ("batch", "single")]
                for np_fa in [np_] + ([wide] if wide else []):
                    if np_fa != np_:
                        row += [cell(fa.get((ds, name, np_fa, fm))) for fm in ("batch", "single")]
                    for (i, m), fm in ratios:
                        p, q = pq.get((ds, name, np_, i, m)), fa.get((ds, name, np_fa, fm))
                        ok = p and q and "qps" in p and q.get("qps")
                        row.append(f"{p['qps'] / q['qps']:.3g}" if ok else "–")
                print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
