#!/usr/bin/env python3
"""CPU per event applied, by thread kind, every INTERVAL seconds of a running tlpd: where an
ingest's CPU goes and which part of it grows with the store (issue #11).

Each row covers one interval: events applied to node memory per second; the machine's busy
share (/proc/stat); the process's CPU per event (all threads, short-lived ones included) and
each kind's (/proc/PID/task/*/schedstat: tlpd-memory, tlpd-writer, RocksDB's compaction and
flush threads, tlpd-seal (adjacency epochs written as table files), the rest); the memory thread's share of the wall time on a core and in the run
queue; the memory thread's stage seconds per event (tlpd_memory_thread_seconds_total) and node
memory lookups per event, from the daemon's /metrics; and tlpctl's CPU per event when a
`tlpctl ... ingest` runs beside it. Ends when the daemon stops answering.

Usage: python3 bench/cpu_account.py PID METRICS_PORT OUT.csv [INTERVAL=60]
"""
import os
import subprocess
import sys
import time
import urllib.request

from thread_cpu import snapshot as snapshot_threads  # tid -> (name, on-core ns, run-queue ns)

KINDS = ["memory", "writer", "compaction", "flush", "seal", "other"]


def kind(thread_name):
    if thread_name.startswith("tlpd-memory"):
        return "memory"
    if thread_name.startswith("tlpd-writer"):
        return "writer"
    if thread_name.startswith("rocksdb:low"):
        return "compaction"
    if thread_name.startswith("rocksdb:high"):
        return "flush"
    if thread_name.startswith("tlpd-seal"):
        return "seal"
    return "other"


def process_seconds(pid):
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError):
        return 0.0


def machine_ticks():
    with open("/proc/stat") as stat:
        values = list(map(int, stat.readline().split()[1:]))
    return sum(values), values[3] + values[4]  # all, idle + iowait


def metrics(port):
    wanted = ("tlpd_events_applied", "tlpd_memory_thread_seconds_total{",
              "tlpd_node_memory_lookups_total{")
    values = {}
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(wanted):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
    return values


def client_pid():
    found = subprocess.run(["pgrep", "-f", "tlpctl.* ingest"], capture_output=True, text=True)
    pids = found.stdout.split()
    return pids[0] if pids else None


def snapshot(pid, port):
    client = client_pid()
    return {"time": time.monotonic(), "threads": snapshot_threads(pid), "metrics": metrics(port),
            "process": process_seconds(pid), "client": client,
            "client_seconds": process_seconds(client), "machine": machine_ticks()}


def row(before, after):
    events = (after["metrics"].get("tlpd_events_applied", 0) -
              before["metrics"].get("tlpd_events_applied", 0))
    if events <= 0:
        return None
    wall = after["time"] - before["time"]
    on_cpu = dict.fromkeys(KINDS, 0.0)
    memory_waiting = 0.0
    for tid, (name, on_ns, waiting_ns) in after["threads"].items():
        if tid in before["threads"]:
            on_cpu[kind(name)] += (on_ns - before["threads"][tid][1]) / 1e9
            if kind(name) == "memory":
                memory_waiting += (waiting_ns - before["threads"][tid][2]) / 1e9
    per_event = lambda seconds: f"{1e6 * seconds / events:.2f}"
    all_ticks = after["machine"][0] - before["machine"][0]
    idle_ticks = after["machine"][1] - before["machine"][1]
    client = (after["client_seconds"] - before["client_seconds"]
              if after["client"] and after["client"] == before["client"] else 0.0)
    result = {
        "events_applied_millions": f"{after['metrics']['tlpd_events_applied'] / 1e6:.2f}",
        "events_per_second": f"{events / wall:.0f}",
        "machine_busy": f"{1 - idle_ticks / max(1, all_ticks):.3f}",
        "process_us": per_event(after["process"] - before["process"]),
    }
    result.update({f"{name}_us": per_event(on_cpu[name]) for name in KINDS})
    result["memory_on_core"] = f"{on_cpu['memory'] / wall:.3f}"
    result["memory_run_queue"] = f"{memory_waiting / wall:.3f}"
    for name, value in sorted(after["metrics"].items()):
        if "{" in name:
            label = name.split('"')[1]
            prefix = "stage" if name.startswith("tlpd_memory_thread") else "lookups"
            unit = "_us" if prefix == "stage" else "_per_event"
            delta = value - before["metrics"].get(name, 0.0)
            result[f"{prefix}_{label}{unit}"] = (per_event(delta) if prefix == "stage"
                                                 else f"{delta / events:.3f}")
    result["tlpctl_us"] = per_event(client)
    return result


def main(pid, port, out, interval=60.0):
    before = snapshot(pid, port)
    header_written = False
    while True:
        time.sleep(interval)
        try:
            after = snapshot(pid, port)
        except OSError:  # the daemon stopped
            return
        values = row(before, after)
        before = after
        if values is None:
            continue
        with open(out, "a") as csv:
            if not header_written:
                csv.write(",".join(values) + "\n")
                header_written = True
            csv.write(",".join(values.values()) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], *(float(a) for a in sys.argv[4:5]))
