#!/usr/bin/env python3
"""Turns the files bench/run.sh wrote into results.json and table.md (printed too).

Each figure stands beside its target (issue #9) and beside a limit of the same machine, measured
by the same run: RocksDB's raw WriteBatch rate with the store's options (ingest), node memory
updates per second of the model alone (memory catch-up, cold start), and float32 GEMM FLOP/s
divided by the model's FLOPs per pair (scoring, TopK).
Usage: bench/report.py OUT_DIR
"""
import json
import pathlib
import statistics
import sys

# FLOPs of one embedding and one scored pair for the default model (memory, time and embedding
# width 100, 2 heads, k = 10, 1 layer), in the factorised attention of model/mass_aware_attention.
D, HEADS, K = 100, 2, 10
INPUT = 2 * D  # neighbour input: memory + time encoding
EMBEDDING_FLOPS = (2 * INPUT * D          # query projection
                   + 2 * D * INPUT        # query into input space (all heads)
                   + 2 * HEADS * K * INPUT          # scores
                   + 2 * HEADS * K * (INPUT + 1)    # weighted sum of inputs
                   + 2 * D * INPUT        # value projection of the sums
                   + 2 * D * D            # output projection
                   + 2 * 2 * D * D + 2 * D * D)     # merge MLP
PAIR_FLOPS = 2 * EMBEDDING_FLOPS + 2 * 2 * D * D + 2 * D  # two endpoints + predictor


def load(directory, name):
    path = directory / name
    return json.loads(path.read_text()) if path.exists() else None


def spread(values):
    return (f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})")


def bench_counter(report, prefix, counter):
    for entry in report["benchmarks"]:
        if entry["name"].startswith(prefix):
            return entry[counter]
    raise KeyError(prefix)


def main():
    directory = pathlib.Path(sys.argv[1])
    model = load(directory, "model_bench.json")
    storage = load(directory, "storage_bench.json")
    machine = load(directory, "machine.json")
    gemm = bench_counter(model, "BM_Gemm/4000/200/100", "flop_per_s")
    gemm_peak = bench_counter(model, "BM_Gemm/2048/2048/2048", "flop_per_s")
    gather = bench_counter(model, "BM_Gather", "bytes_per_s")
    memory_updates = bench_counter(model, "BM_ApplyEvents", "events_per_s")
    raw_write = bench_counter(storage, "BM_RawWriteBatch", "events_per_s")
    append_ids = bench_counter(storage, "BM_Append/batch:10000/sync:1/ids:1", "events_per_s")
    model_pairs = bench_counter(model, "BM_ScorePairs/architecture:0/pairs:2000/", "pairs_per_s")
    pair_limit = gemm / PAIR_FLOPS

    rows = []  # (figure, measured, target, limit, ratio)

    def row(figure, measured, target="", limit="", ratio=None):
        rows.append({"figure": figure, "measured": measured, "target": target, "limit": limit,
                     "ratio": None if ratio is None else round(ratio, 3)})

    events = None
    for streams in (1, 4):
        rates, applied, rss, memtables = [], [], [], []
        for run in (1, 2, 3):
            ingest = load(directory, f"ingest-{streams}-{run}.json")
            extra = load(directory, f"ingest-{streams}-{run}-extra.json")
            events = ingest["sent"]
            rates.append(ingest["events_per_second"])
            applied.append(events / (ingest["seconds"] + extra["info_end"] - extra["info_begin"]))
            rss.append((extra["rss_after_kib"] - extra["rss_empty_kib"]) / 1024 / events * 1e6)
            memtables.append(extra["memtable_bytes"] / 2**20 / events * 1e6)
        row(f"durable ingest over gRPC, {streams} stream(s), events/s (median; range of 3)",
            spread(rates), ">= 200,000", f"{raw_write:,.0f} (RocksDB raw WriteBatch)",
            statistics.median(rates) / raw_write)
        row(f"  ... and applied to node memory, {streams} stream(s), events/s", spread(applied),
            "", f"{memory_updates:,.0f} (model memory updates alone)",
            statistics.median(applied) / memory_updates)
        if streams == 1:
            rss_per_million = statistics.median(rss)
            memtables_per_million = statistics.median(memtables)
    row("store append alone (with ids, batch 10,000, fsync), events/s", f"{append_ids:,.0f}", "",
        f"{raw_write:,.0f} (RocksDB raw WriteBatch)", append_ids / raw_write)
    kafka_path = directory / "kafka_bench.json"
    if kafka_path.exists():  # one JSON object per line, one per partition count
        for line in kafka_path.read_text().splitlines():
            kafka = json.loads(line)
            row(f"Kafka (mock broker, same cores) to durable, {kafka['partitions']} partition(s), "
                "events/s; applied to node memory", f"{kafka['durable_events_per_second']:,.0f}; "
                f"{kafka['applied_events_per_second']:,.0f}", "",
                f"{raw_write:,.0f} (RocksDB raw WriteBatch)",
                kafka["durable_events_per_second"] / raw_write)

    def faults(name, per):  # the daemon's minor page faults per unit of work, if recorded
        path = directory / f"{name}-faults.json"
        return f"; {json.loads(path.read_text())['minor_faults'] / per:.2f} faults" \
            if path.exists() else ""

    for concurrency in (1, 16, 64):
        score = load(directory, f"score-{concurrency}.json")
        target = ">= 20,000, p99 <= 20 ms" if concurrency == 16 else ""
        pairs = score["pairs_per_second"] * score["seconds"]
        row(f"ScoreLinks, concurrency {concurrency} (10 pairs/request): pairs/s, p50 / p99 ms; "
            "minor page faults per pair",
            f"{score['pairs_per_second']:,.0f}, {score['p50_ms']:.1f} / {score['p99_ms']:.1f}"
            f"{faults(f'score-{concurrency}', pairs)}",
            target, f"{pair_limit:,.0f} pairs/s (GEMM FLOP/s / {PAIR_FLOPS:,} FLOP)",
            score["pairs_per_second"] / pair_limit)
    row("model alone, batch 2,000 pairs, pairs/s", f"{model_pairs:,.0f}", "",
        f"{pair_limit:,.0f}", model_pairs / pair_limit)
    topk = load(directory, "topk-1.json")
    topk_limit_ms = (1001 * EMBEDDING_FLOPS + 1000 * (PAIR_FLOPS - 2 * EMBEDDING_FLOPS)) / gemm * 1e3
    row("TopK over all 1,000 pages, p50 / p99 ms; minor page faults per TopK",
        f"{topk['p50_ms']:.1f} / {topk['p99_ms']:.1f}{faults('topk-1', topk['requests'])}",
        "p99 <= 20",
        f"{topk_limit_ms:.1f} ms (FLOPs / GEMM FLOP/s)", topk_limit_ms / topk["p50_ms"])
    train_path = directory / "train.json"
    if train_path.exists():
        epoch = json.loads(train_path.read_text())["epochs"][0]
        rusage = load(directory, "train-rusage.json")
        trained = epoch["events_per_second"] * epoch["seconds"]
        row("training, 1 epoch of the bundled model: events/s; minor page faults per event "
            "(whole process)", f"{epoch['events_per_second']:,.0f}; "
            f"{rusage['minor_faults'] / trained:.2f} faults", ">= 10,000")
    # The other architectures (bench/run.sh's TLP_BENCH_ARCHITECTURES), each beside the model's
    # own share of the same work (model_bench, random weights: the cost is the same).
    architectures = ["tgn", "tgat", "graphmixer", "dygformer"]
    for path in sorted(directory.glob("train-arch-*.json")):
        name = path.stem[len("train-arch-"):]
        index = architectures.index(name)
        pair_neighbors = 0 if name == "dygformer" else 64
        epoch = json.loads(path.read_text())["epochs"][0]
        row(f"{name}: training, 1 epoch, events/s", f"{epoch['events_per_second']:,.0f}")
        score = load(directory, f"score-16-{name}.json")
        alone = bench_counter(model, f"BM_ScorePairs/architecture:{index}/pairs:2000/",
                              "pairs_per_s")
        row(f"{name}: ScoreLinks, concurrency 16 (10 pairs/request): pairs/s, p50 / p99 ms",
            f"{score['pairs_per_second']:,.0f}, {score['p50_ms']:.1f} / {score['p99_ms']:.1f}", "",
            f"{alone:,.0f} pairs/s (model alone, 2,000 pairs)", score["pairs_per_second"] / alone)
        for shortlist in (0, 100):
            topk = load(directory, f"topk-1-{name}-{shortlist}.json")
            if topk is None:
                continue
            alone_ms = bench_counter(
                model, f"BM_RankPages/architecture:{index}/pair_neighbors:{pair_neighbors}/"
                f"candidates:{shortlist}/", "real_time")
            over = "all 1,000 pages" if shortlist == 0 else f"a shortlist of {shortlist}"
            row(f"{name}: TopK over {over}, p50 / p99 ms",
                f"{topk['p50_ms']:.1f} / {topk['p99_ms']:.1f}", "",
                f"{alone_ms:.1f} ms (model alone)", alone_ms / topk["p50_ms"])
    cold = load(directory, "cold-start.json")
    cold_seconds = cold["serving"] - cold["begin"]
    cold_limit = events / memory_updates
    row(f"cold start: exec to SERVING, replaying {events:,} events, s", f"{cold_seconds:.2f}",
        "<= 5", f"{cold_limit:.2f} s (model memory updates alone)", cold_limit / cold_seconds)
    row("RSS growth per million events ingested, MiB (of it RocksDB memtables, which flush "
        "at 64 MiB per column family instead of growing on)",
        f"{rss_per_million:,.0f} ({memtables_per_million:,.0f})")
    disk = load(directory, "disk.json")
    row("RocksDB bytes per event on disk (SST + WAL after shutdown)",
        f"{disk['bytes'] / events:,.0f}")
    row("neighbour lookup, k = 10, now / past, us",
        f"{bench_counter(storage, 'BM_Recent/past:0', 'real_time'):.2f} / "
        f"{bench_counter(storage, 'BM_Recent/past:1', 'real_time'):.2f}")
    row("limits: GEMM 4000x200x100 / 2048^3 GFLOP/s, gather GB/s",
        f"{gemm / 1e9:.1f} / {gemm_peak / 1e9:.1f}, {gather / 1e9:.1f}")

    results = {"machine": machine, "rows": rows, "cold_start_log": cold["log"],
               "flops_per_pair": PAIR_FLOPS, "flops_per_embedding": EMBEDDING_FLOPS}
    (directory / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [f"Machine: {machine['cpu']} (model {machine.get('cpu_model', '?')}), "
             f"{machine['cores']} cores, {machine['memory_gib']} GiB, THP {machine.get('thp', '?')}, "
             f"OPENBLAS_CORETYPE '{machine.get('openblas_coretype', '')}'; "
             f"commit {machine['commit']}, {machine['date']}. `bash bench/run.sh`.", "",
             "| figure | measured | target | limit on this machine | measured / limit |",
             "|---|---|---|---|---|"]
    for r in rows:
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}"
        lines.append(f"| {r['figure']} | {r['measured']} | {r['target']} | {r['limit']} | {ratio} |")
    table = "\n".join(lines) + "\n"
    (directory / "table.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
