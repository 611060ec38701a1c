#!/usr/bin/env python3
"""One row of docs/performance.md's scale table from a bench/scale.sh run: events/s applied to node memory over the 2M events
around 1M / 10M / 25M / 50M / 99M events (from 1M events before the point to 1M after it, by
the 5 s samples, clipped to the stream: it starts at 0 and ends before the last events, whose
drain and the idle samples after it are not ingest), RSS where the run first reached the point,
and the summary's totals, disk and latencies.

Usage: python3 bench/scale_summary.py OUT_DIR   (the directory bench/scale.sh wrote)
"""
import csv
import json
import sys

POINTS = [1e6, 10e6, 25e6, 50e6, 99e6]
HALF_WINDOW_EVENTS = 1e6


def main(out):
    samples = [(float(row["seconds"]), int(row["events_applied"]), int(row["rss_kib"] or 0))
               for row in csv.DictReader(open(f"{out}/samples.csv")) if row["events_applied"]]
    summary = json.load(open(f"{out}/summary.json"))
    streaming = [s for s in samples if s[1] < summary["events"]]
    rates, rss = [], []
    for point in POINTS:
        reached = next((s for s in samples if s[1] >= point), None)
        if reached is None:
            break
        first = next(s for s in streaming if s[1] >= point - HALF_WINDOW_EVENTS)
        last = next((s for s in streaming if s[1] >= point + HALF_WINDOW_EVENTS), streaming[-1])
        rates.append(f"{(last[1] - first[1]) / (last[0] - first[0]) / 1e3:.0f}k")
        rss.append(f"{reached[2] / 1048576:.1f}")
    minutes = summary["applied_seconds"] / 60
    mean = summary["events"] / summary["applied_seconds"] / 1e3
    print(f"ingest events/s at {' / '.join(f'{p / 1e6:.0f}M' for p in POINTS[:len(rates)])}: "
          f"{' / '.join(rates)} (mean {mean:.0f}k; {minutes:.1f} min)")
    print(f"RSS GiB there: {' / '.join(rss)}; end / peak / after restart: "
          f"{summary['rss_end_kib'] / 1048576:.1f} / {summary['rss_peak_kib'] / 1048576:.1f} / "
          f"{summary['rss_after_restart_kib'] / 1048576:.1f}")
    print(f"disk {summary['disk_bytes'] / summary['events']:.0f} B/event; "
          f"cold start {summary['cold_start_seconds']:.1f} s; commit {summary['commit']}")
    for name in ["score-hot", "score-cold", "topk-hot", "topk-cold"]:
        result = json.load(open(f"{out}/{name}.json"))
        print(f"{name}: {result['pairs_per_second']:,.0f} pairs/s, p50 {result['p50_ms']:.1f} ms, "
              f"p99 {result['p99_ms']:.1f} ms")


if __name__ == "__main__":
    main(sys.argv[1])
