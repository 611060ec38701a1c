#!/usr/bin/env python3
"""The ranking results table from bench/ranking.sh's per-run JSON (OUT_DIR/runs/*.json).

Per data set and configuration: mean +- sample std over seeds of the one-vs-all MRR, Hits@1 and
Hits@10 (TopK over every destination seen so far), AP with random and historical negatives (the
replay), AP with inductive negatives, new-node AP and the degree probe's R^2 (the offline test
report of `tlpd train`, where the run has one), and the validation MRR of the epoch kept; then
the built-in baselines on the same queries (one row set per query count). Runs of models with a
node-state head (`tlpd train --node-state`) or trained with `--monitor` also get a second table: the node-state outcome's
AUC and AP on the test period, its validation AUC at the epoch kept and at its best epoch, and
each outcome's attention at the first and the kept epoch (normalised entropy: 0 = all weight on
one neighbour, 1 = uniform; the first layer's query-projection norm).
Writes OUT_DIR/table.md and OUT_DIR/results.json and prints the table; runs of further
directories join the table (one run per data set, configuration and seed: the first found).
Usage: python3 bench/ranking_table.py OUT_DIR [MORE_DIRS ...]
"""
import collections
import json
import pathlib
import statistics
import sys


def cell(values, digits=3):
    if not values:
        return ""
    mean = statistics.mean(values)
    if len(values) < 2:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def main():
    directory = pathlib.Path(sys.argv[1])
    runs = collections.defaultdict(lambda: collections.defaultdict(list))
    baselines = {}
    states = collections.defaultdict(lambda: collections.defaultdict(list))
    queries = {}  # (dataset, config) -> ranked queries
    seen = set()
    paths = [path for other in sys.argv[1:]
             for path in sorted((pathlib.Path(other) / "runs").glob("*.eval.json"))]
    for path in paths:
        stem = path.name[: -len(".eval.json")]
        if stem in seen:
            continue
        seen.add(stem)
        dataset, rest = stem.split("-", 1)
        config, _ = rest.rsplit("-seed", 1)
        evaluation = json.loads(path.read_text())
        train = json.loads((path.parent / f"{stem}.train.json").read_text())
        best = max(train["epochs"], key=lambda e: e.get("validation_mrr", 0))
        figures = runs[(dataset, config)]
        figures["validation_mrr"].append(best.get("validation_mrr", 0))
        figures["epochs"].append(len(train["epochs"]))
        figures["mrr"].append(evaluation["ranking"]["mrr"])
        figures["hits_at_1"].append(evaluation["ranking"]["hits_at_1"])
        figures["hits_at_10"].append(evaluation["ranking"]["hits_at_10"])
        figures["ap_random"].append(evaluation["random"]["ap"])
        figures["ap_historical"].append(evaluation["historical"]["ap"])
        test = train.get("test")  # absent when trained with --no-eval
        if test:
            figures["ap_inductive"].append(test["transductive"]["inductive"]["ap"])
            figures["new_node_ap"].append(test["inductive"]["random"]["ap"])
            figures["probe_r2"].append(test["probe_r2"])
        if "outcomes" in best:  # a node-state model, or one trained with --monitor
            state = states[(dataset, config)]
            state["mrr"].append(evaluation["ranking"]["mrr"])
            if test and "node_state" in test:
                state["auc"].append(test["node_state"]["auc"])
                state["ap"].append(test["node_state"]["ap"])
                state["validation_auc"].append(best["validation_node_state_auc"])
                state["best_validation_auc"].append(
                    max(e["validation_node_state_auc"] for e in train["epochs"]))
            for when, epoch in (("first", train["epochs"][0]), ("kept", best)):
                for monitor in epoch["outcomes"]:
                    outcome = monitor["outcome"]
                    state[f"{outcome}_entropy_{when}"].append(monitor["normalised_entropy"])
                    if monitor["query_norms"]:  # none without temporal attention
                        state[f"{outcome}_norm_{when}"].append(monitor["query_norms"][0])
        baselines[(dataset, evaluation["ranking"]["queries"])] = evaluation["baselines"]
        queries[(dataset, config)] = evaluation["ranking"]["queries"]

    lines = ["| data set | model | seeds | epochs | validation MRR | test MRR | Hits@1 | Hits@10 "
             "| AP random | AP historical | AP inductive | new-node AP | probe R² |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    results = []
    for (dataset, config), figures in sorted(runs.items()):
        lines.append(f"| {dataset} ({queries[(dataset, config)]} queries) | {config} | "
                     f"{len(figures['mrr'])} | {cell(figures['epochs'], 1)} | "
                     f"{cell(figures['validation_mrr'])} | **{cell(figures['mrr'])}** | "
                     f"{cell(figures['hits_at_1'])} | {cell(figures['hits_at_10'])} | "
                     f"{cell(figures['ap_random'])} | {cell(figures['ap_historical'])} | "
                     f"{cell(figures['ap_inductive'])} | {cell(figures['new_node_ap'])} | "
                     f"{cell(figures['probe_r2'])} |")
        results.append({"dataset": dataset, "config": config, **figures})
    for (dataset, count), rows in sorted(baselines.items()):
        for name, figures in rows.items():
            lines.append(f"| {dataset} ({count} queries) | baseline: {name} | | | | "
                         f"{figures['mrr']:.3f} | {figures['hits_at_1']:.3f} | "
                         f"{figures['hits_at_10']:.3f} | | | | | |")
            results.append({"dataset": dataset, "config": f"baseline:{name}", **figures})
    # MAA against softmax, cell by cell (same data set, same family, test MRR means).
    wins, cells = 0, []
    for (dataset, config), figures in sorted(runs.items()):
        if "maa" not in config:
            continue
        softmax = runs.get((dataset, config.split("-maa")[0] + "-softmax"))
        if not softmax:
            continue
        delta = statistics.mean(figures["mrr"]) - statistics.mean(softmax["mrr"])
        wins += delta > 0
        cells.append(f"{dataset} {config} {delta:+.3f}")
    lines += ["", f"MAA above softmax in {wins} of {len(cells)} cells (test MRR, mean over "
              f"seeds): " + "; ".join(cells) + "."]
    if states:
        lines += ["", "| data set | model | seeds | link MRR | node-state AUC | node-state AP "
                  "| validation AUC (kept / best epoch) | normalised entropy link (first → kept) "
                  "| node state (first → kept) | query norm link (first → kept) "
                  "| node state (first → kept) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for (dataset, config), state in sorted(states.items()):
            def trend(key):
                if not state.get(key + "_first"):
                    return ""
                return f"{cell(state[key + '_first'], 2)} → {cell(state[key + '_kept'], 2)}"
            validation = (f"{cell(state['validation_auc'])} / {cell(state['best_validation_auc'])}"
                          if state["auc"] else "")
            lines.append(
                f"| {dataset} | {config} | {len(state['mrr'])} | {cell(state['mrr'])} | "
                f"{'**' + cell(state['auc']) + '**' if state['auc'] else ''} | {cell(state['ap'])} | "
                f"{validation} | "
                f"{trend('link_entropy')} | {trend('node_state_entropy')} | "
                f"{trend('link_norm')} | {trend('node_state_norm')} |")
            results.append({"dataset": dataset, "config": config, "node_state": state})
    table = "\n".join(lines) + "\n"
    (directory / "table.md").write_text(table)
    (directory / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print(table)


if __name__ == "__main__":
    main()
