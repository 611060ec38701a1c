#!/usr/bin/env python3
"""Where a running process's threads spend a window of wall time: on a core, or runnable but
waiting for one (the run queue), from /proc/PID/task/*/schedstat at both ends of the window.
tlpd names its threads (tlpd-memory, tlpd-writer, ...), so the rows say which stage waits.
Threads that start or end inside the window are not counted.

Usage: python3 bench/thread_cpu.py PID [SECONDS=30] [ROWS=8]
"""
import os
import sys
import time


def snapshot(pid):
    threads = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as comm:
                name = comm.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as schedstat:
                on_cpu_ns, waiting_ns = map(int, schedstat.read().split()[:2])
        except OSError:  # the thread ended meanwhile
            continue
        threads[tid] = (name, on_cpu_ns, waiting_ns)
    return threads


def main(pid, seconds=30.0, rows=8):
    before = snapshot(pid)
    begin = time.monotonic()
    time.sleep(seconds)
    after = snapshot(pid)
    wall_ns = (time.monotonic() - begin) * 1e9
    both = [tid for tid in after if tid in before]
    both.sort(key=lambda tid: after[tid][1] - before[tid][1], reverse=True)
    print(f"{'tid':>8} {'thread':<16} {'on a core':>9} {'run queue':>9}")
    for tid in both[:rows]:
        name, on_cpu, waiting = after[tid]
        print(f"{tid:>8} {name:<16} {100 * (on_cpu - before[tid][1]) / wall_ns:8.0f}% "
              f"{100 * (waiting - before[tid][2]) / wall_ns:8.0f}%")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 30.0,
         int(sys.argv[3]) if len(sys.argv) > 3 else 8)
