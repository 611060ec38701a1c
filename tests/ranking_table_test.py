#!/usr/bin/env python3
"""bench/ranking_table.py on hand-made run JSON: the means, the row of MAA at the p chosen on
validation (seed by seed) and the counts against softmax.
Usage: python3 tests/ranking_table_test.py SOURCE_DIR"""
import json
import pathlib
import subprocess
import sys
import tempfile


def write_run(runs, stem, validation_mrr, test_mrr):
    (runs / f"{stem}.train.json").write_text(json.dumps(
        {"epochs": [{"validation_mrr": validation_mrr - 0.1}, {"validation_mrr": validation_mrr}]}))
    (runs / f"{stem}.eval.json").write_text(json.dumps({
        "ranking": {"mrr": test_mrr, "hits_at_1": test_mrr / 2, "hits_at_10": 0.9,
                    "queries": 100},
        "random": {"ap": 0.99}, "historical": {"ap": 0.8},
        "baselines": {"recency_popularity": {"mrr": 0.65, "hits_at_1": 0.5,
                                             "hits_at_10": 0.8}}}))


def main():
    source = pathlib.Path(sys.argv[1])
    with tempfile.TemporaryDirectory() as scratch:
        out = pathlib.Path(scratch)
        runs = out / "runs"
        runs.mkdir()
        # (config, seed): (validation MRR, test MRR). Seed 0 chooses p = 2, seed 1 p = 1.1.
        for (config, seed), (validation, test) in {
                ("fam-softmax", 0): (0.50, 0.70), ("fam-softmax", 1): (0.50, 0.70),
                ("fam-maa1.1", 0): (0.50, 0.70), ("fam-maa1.1", 1): (0.60, 0.72),
                ("fam-maa2", 0): (0.60, 0.80), ("fam-maa2", 1): (0.50, 0.75),
                # One MAA p only: no chosen row; level with softmax to three decimals on the
                # seed both have (softmax's seed 1 has no MAA run to compare with).
                ("one-softmax", 0): (0.50, 0.6001), ("one-maa1.1", 0): (0.50, 0.6003),
                ("one-softmax", 1): (0.50, 0.9),
        }.items():
            write_run(runs, f"data-{config}-seed{seed}", validation, test)
        printed = subprocess.run(
            [sys.executable, str(source / "bench" / "ranking_table.py"), str(out)],
            check=True, capture_output=True, text=True).stdout
        table = (out / "table.md").read_text()
        assert printed == table + "\n", "prints what it writes"
        rows = {line.split(" | ")[1]: line for line in table.splitlines()
                if line.startswith("| data (100 queries) |")}
        chosen = rows.get("fam-maa-chosen (p 2, 1.1)")
        assert chosen, f"no chosen row with p 2 then 1.1 in:\n{table}"
        assert "| 2 | 2.0 ± 0.0 | 0.600 ± 0.000 | **0.760 ± 0.057** |" in chosen, chosen
        assert "one-maa-chosen" not in table, "one p run: nothing to choose between"
        assert "**0.710 ± 0.014**" in rows["fam-maa1.1"], rows["fam-maa1.1"]
        assert "| baseline: recency_popularity | | | | 0.650 |" in table, table
        assert ("MAA at the p chosen on validation above softmax in 1 of 1 cells, below in 0, "
                "level in 0") in table, table
        assert "data fam-maa-chosen (p 2, 1.1) +0.060" in table, table
        assert "MAA above softmax in 2 of 3 cells, below in 0, level in 1" in table, table
        assert "data one-maa1.1 +0.000" in table, table
        results = json.loads((out / "results.json").read_text())
        configs = {row["config"] for row in results}
        assert "fam-maa-chosen (p 2, 1.1)" in configs, configs
    print("ranking table: ok")


if __name__ == "__main__":
    main()
