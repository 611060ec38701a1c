#!/usr/bin/env bash
# Checks the lock annotations (ABSL_GUARDED_BY and friends over common/mutex.h) with clang's
# -Wthread-safety: the build uses GCC, which ignores them. Compiles each server translation
# unit, syntax only, with the build's own flags from BUILD_DIR/compile_commands.json (GCC's
# precompiled header dropped).
#
# Not checked: units that include torch's headers, themselves or through model/ (engine.cc, the
# commands, the attention monitor's plot):
# clang 14 cannot compile LibTorch 1.13's headers against GCC 12's C++20 library (incomplete
# c10::IValue in std::vector). That is why the memory pipeline reaches the model through a
# callback (MemoryModel) instead of including it.
#
# Usage: bash scripts/thread_safety_check.sh [BUILD_DIR]   (default build; needs clang++)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
command -v clang++ > /dev/null || { echo "thread_safety_check: clang++ not found" >&2; exit 1; }
torch_includes='#include <torch/\|#include <ATen/\|#include "model/'
mapfile -t units < <(grep -L "$torch_includes" server/*.cc | sort)
echo "not checked (include torch): $(grep -l "$torch_includes" server/*.cc | tr '\n' ' ')"
python3 - "$build/compile_commands.json" "${units[@]}" <<'PY'
import json, os, shlex, subprocess, sys
database, units = sys.argv[1], sys.argv[2:]
entries = {os.path.relpath(e["file"]): e for e in json.load(open(database))}
failed = 0
for unit in units:
    entry = entries.get(unit)
    if entry is None:
        continue  # not built in this configuration (e.g. Kafka off)
    args, command, skip = shlex.split(entry["command"]), ["clang++"], False
    for arg in args[1:]:
        if skip:
            skip = False
        elif arg in ("-o", "-include"):
            skip = True
        elif arg not in ("-c", "-Winvalid-pch", entry["file"]):
            command.append(arg)
    command += ["-fsyntax-only", "-Wno-unknown-warning-option", "-Wno-gnu-statement-expression", "-Wthread-safety",
                "-Werror=thread-safety", entry["file"]]
    result = subprocess.run(command, cwd=entry["directory"], capture_output=True, text=True)
    if result.returncode != 0:
        failed += 1
        print(result.stderr, file=sys.stderr)
    print(f"{'FAIL' if result.returncode else 'ok  '} {unit}")
sys.exit(1 if failed else 0)
PY
