#!/usr/bin/env python3
"""The ranking results table from bench/ranking.sh's per-run JSON (OUT_DIR/runs/*.json).

Per data set and configuration: mean +- sample std over seeds of the one-vs-all MRR, Hits@1 and
Hits@10 (TopK over every destination seen so far), AP with random and historical negatives (the
replay), AP with inductive negatives, new-node AP and the degree probe's R^2 (the offline test
report of `tlpd train`, where the run has one), and the validation MRR of the epoch kept; then
the built-in baselines on the same queries (one row set per query count). Each family run at
two or more MAA p values (configurations named `<family>-maa<p>`) also gets a
`<family>-maa-chosen` row: for each seed, the run whose p has the highest validation MRR (the
protocol's "MAA at the p chosen on validation"; the p chosen per seed in the row's name). The
line under the table counts the cells where MAA beats softmax (means over the seeds both rows
have), chosen p first. Runs of models with a
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
import re
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
    by_seed = collections.defaultdict(dict)  # (dataset, config) -> seed -> that run's figures
    seen = set()
    paths = [path for other in sys.argv[1:]
             for path in sorted((pathlib.Path(other) / "runs").glob("*.eval.json"))]
    for path in paths:
        stem = path.name[: -len(".eval.json")]
        if stem in seen:
            continue
        seen.add(stem)
        dataset, rest = stem.split("-", 1)
        config, seed = rest.rsplit("-seed", 1)
        evaluation = json.loads(path.read_text())
        train = json.loads((path.parent / f"{stem}.train.json").read_text())
        best = max(train["epochs"], key=lambda e: e.get("validation_mrr", 0))
        run = {"validation_mrr": best.get("validation_mrr", 0), "epochs": len(train["epochs"]),
               "mrr": evaluation["ranking"]["mrr"],
               "hits_at_1": evaluation["ranking"]["hits_at_1"],
               "hits_at_10": evaluation["ranking"]["hits_at_10"],
               "ap_random": evaluation["random"]["ap"],
               "ap_historical": evaluation["historical"]["ap"]}
        test = train.get("test")  # absent when trained with --no-eval
        if test:
            run["ap_inductive"] = test["transductive"]["inductive"]["ap"]
            run["new_node_ap"] = test["inductive"]["random"]["ap"]
            run["probe_r2"] = test["probe_r2"]
        for key, value in run.items():
            runs[(dataset, config)][key].append(value)
        by_seed[(dataset, config)][seed] = run
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

    # MAA at the p chosen on validation, seed by seed, among the p values run for that seed.
    families = collections.defaultdict(list)  # (dataset, family) -> [(p, config)]
    for dataset, config in list(runs):
        match = re.fullmatch(r"(.*)-maa([0-9.]+)", config)
        if match:
            families[(dataset, match.group(1))].append((match.group(2), config))
    for (dataset, family), variants in sorted(families.items()):
        if len(variants) < 2:
            continue
        figures, chosen, chosen_runs = collections.defaultdict(list), [], {}
        for seed in sorted({seed for _, config in variants for seed in by_seed[(dataset, config)]},
                           key=int):
            candidates = [(by_seed[(dataset, config)][seed]["validation_mrr"], p, config)
                          for p, config in variants if seed in by_seed[(dataset, config)]]
            if len(candidates) < 2:
                continue  # nothing to choose between for this seed yet
            # The highest validation MRR; on a tie the smaller p (the nearer to softmax).
            _, _, p, config = max((mrr, -float(p), p, config) for mrr, p, config in candidates)
            chosen.append(p)
            chosen_runs[seed] = by_seed[(dataset, config)][seed]
            for key, value in chosen_runs[seed].items():
                figures[key].append(value)
        if chosen:
            name = f"{family}-maa-chosen (p {', '.join(chosen)})"
            runs[(dataset, name)] = figures
            by_seed[(dataset, name)] = chosen_runs
            queries[(dataset, name)] = queries[(dataset, variants[0][1])]

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
    # MAA against softmax, cell by cell (same data set, same family, test MRR means over the
    # seeds both rows have): at the p chosen on validation, then at each p run. A difference
    # that rounds to 0.000 is a tie.
    def against_softmax(what, pattern):
        above, below, cells = 0, 0, []
        for dataset, config in sorted(runs):
            match = re.fullmatch(pattern, config)
            softmax = match and by_seed.get((dataset, match.group(1) + "-softmax"))
            seeds = softmax and sorted(set(softmax) & set(by_seed[(dataset, config)]))
            if not seeds:
                continue
            delta = round(statistics.mean(by_seed[(dataset, config)][seed]["mrr"] for seed in seeds)
                          - statistics.mean(softmax[seed]["mrr"] for seed in seeds), 3)
            above += delta > 0
            below += delta < 0
            cells.append(f"{dataset} {config} {delta:+.3f}")
        return ["", f"{what} above softmax in {above} of {len(cells)} cells, below in {below}, "
                f"level in {len(cells) - above - below} (test MRR, mean over the seeds both rows "
                f"have, to three decimals): " + "; ".join(cells) + "."]
    lines += against_softmax("MAA at the p chosen on validation", r"(.*)-maa-chosen \(.*\)")
    lines += against_softmax("MAA", r"(.*)-maa[0-9.]+")
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
