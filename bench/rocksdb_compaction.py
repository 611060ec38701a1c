#!/usr/bin/env python3
"""Compaction per column family from a RocksDB LOG: jobs, CPU seconds, wall seconds, bytes written.

Usage: python3 bench/rocksdb_compaction.py DATA_DIR/LOG > OUT.csv

RocksDB's own statistics dump comes every 10 minutes and not at close, so a run's last minutes
are missing from it; its event log has every compaction. The "compaction_finished" event names
its job, not its column family, so the family comes from the job's "[family] [JOB n] Compacting"
line.
"""
import collections
import json
import re
import sys

JOB_LINE = re.compile(r"\[([^\]]+)\] \[JOB (\d+)\] Compacting")


def main():
    family_of_job = {}
    totals = collections.defaultdict(lambda: [0, 0, 0, 0])  # jobs, cpu us, wall us, bytes
    with open(sys.argv[1], errors="replace") as log:
        for line in log:
            match = JOB_LINE.search(line)
            if match:
                family_of_job[int(match.group(2))] = match.group(1)
                continue
            if '"compaction_finished"' not in line:
                continue
            event = json.loads(line[line.index("{"):])
            total = totals[family_of_job.get(event["job"], "?")]
            total[0] += 1
            total[1] += event.get("compaction_time_cpu_micros", 0)
            total[2] += event.get("compaction_time_micros", 0)
            total[3] += event.get("total_output_size", 0)
    print("column_family,jobs,cpu_seconds,wall_seconds,output_gb")
    for family, (jobs, cpu, wall, output) in sorted(totals.items()):
        print(f"{family},{jobs},{cpu / 1e6:.1f},{wall / 1e6:.1f},{output / 1e9:.2f}")


if __name__ == "__main__":
    main()
