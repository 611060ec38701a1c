#!/usr/bin/env python3
"""Summarises scripts/sweep.sh runs into docs/model.md's AP results table.

For each data set and architecture: softmax (p = 1), p = 2, and the p with the best mean
validation AP over the sweep (chosen on validation only), each as mean +- std over seeds of the
test AP/AUC (random and historical negatives, transductive), new-node AP (random negatives) and
the degree-probe R^2.
"""
import json
import pathlib
import statistics
import sys
from collections import defaultdict


def main(directory: str) -> None:
    runs = defaultdict(list)  # (dataset, architecture, p) -> [json]
    for path in sorted(pathlib.Path(directory).glob("*.json")):
        dataset, architecture, p, _seed = path.stem.split("-")
        runs[(dataset, architecture, float(p[1:]))].append(json.loads(path.read_text()))

    def mean_std(values):
        if not values:
            return "-"
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        return f"{100 * statistics.mean(values):.2f} ± {100 * std:.2f}"

    def column(results, *keys):
        values = []
        for result in results:
            value = result
            for key in keys:
                value = value[key]
            values.append(value)
        return values

    print("| data | model | p | seeds | val AP | AP random | AUC random | AP historical |"
          " AUC historical | new-node AP | probe R² |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    groups = sorted({(d, a) for d, a, _ in runs})
    for dataset, architecture in groups:
        ps = sorted(p for d, a, p in runs if (d, a) == (dataset, architecture))
        validation = {p: statistics.mean(max(e["validation_ap"] for e in r["epochs"])
                                         for r in runs[(dataset, architecture, p)]) for p in ps}
        best = max(ps, key=lambda p: validation[p])
        shown = [(1.0, "softmax"), (2.0, "MAA"), (best, "MAA, best on val")]
        for p, label in shown:
            results = runs.get((dataset, architecture, p), [])
            if not results:
                continue
            test = [r["test"] for r in results]
            print(f"| {dataset} | {architecture.upper()} | {p:g} ({label}) | {len(results)} |"
                  f" {mean_std([max(e['validation_ap'] for e in r['epochs']) for r in results])} |"
                  f" {mean_std(column(test, 'transductive', 'random', 'ap'))} |"
                  f" {mean_std(column(test, 'transductive', 'random', 'auc'))} |"
                  f" {mean_std(column(test, 'transductive', 'historical', 'ap'))} |"
                  f" {mean_std(column(test, 'transductive', 'historical', 'auc'))} |"
                  f" {mean_std(column(test, 'inductive', 'random', 'ap'))} |"
                  f" {mean_std(column(test, 'probe_r2'))} |")
    print()
    print("Validation AP by p (mean over seeds):")
    for dataset, architecture in groups:
        ps = sorted(p for d, a, p in runs if (d, a) == (dataset, architecture))
        cells = ", ".join(
            f"{p:g}: {100 * statistics.mean(max(e['validation_ap'] for e in r['epochs']) for r in runs[(dataset, architecture, p)]):.2f}"
            for p in ps)
        print(f"- {dataset} {architecture.upper()}: {cells}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/sweep")
