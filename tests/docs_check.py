#!/usr/bin/env python3
"""Docs stay true: every repository path that README.md, docs/*.md or a code comment cites must
exist, every option that README.md or docs/ gives to tlpd or tlpctl must be one the binary lists
in its --help, and docs/operations.md's configuration table must be `tlpd serve --help`'s.

Usage: docs_check.py SOURCE_DIR TLPD TLPCTL
       docs_check.py --table TLPD   (prints the configuration table, for docs/operations.md)
"""
import os
import pathlib
import re
import subprocess
import sys

# --help shows TLPD_* values as defaults: read it without them.
CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("TLPD_")}


def help_of(binary, *command):
    return subprocess.run([binary, *command, "--help"], capture_output=True, text=True,
                          env=CLEAN_ENV).stdout


def serve_table(tlpd):
    """One markdown row per `tlpd serve` option: option, variable, default, meaning."""
    text = help_of(tlpd, "serve").split("Options:", 1)[1]
    rows = ["| option | variable | default | meaning |", "|---|---|---|---|"]
    for entry in re.split(r"\n  (?=-)", text):
        entry = " ".join(entry.split())
        match = re.match(r"(?:-h,)?(--[a-z0-9-]+)(\{[^}]*\})?(?: [A-Z]+(?::[A-Z]+)?)?"
                         r"(?:=(\S+))?\s+(.*)", entry)
        if not match or match.group(1) == "--help":
            continue
        meaning = match.group(4)
        variable = re.search(r"\[env (TLPD_[A-Z_]+)\]", meaning)
        meaning = re.sub(r"\s*\[env TLPD_[A-Z_]+\]", "", meaning).replace("|", "\\|")
        default = f"`{match.group(3)}`" if match.group(3) else ""
        rows.append(f"| `{match.group(1)}` | `{variable.group(1) if variable else ''}` | "
                    f"{default} | {meaning} |")
    return rows


if sys.argv[1] == "--table":
    print("\n".join(serve_table(sys.argv[2])))
    sys.exit(0)

root, tlpd, tlpctl = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
problems = []

TOP = "proto|common|storage|model|server|client|deploy|tests|bench|docs|scripts|fuzz|data"
PATH = re.compile(r"(?<![\w./-])((?:%s)/[A-Za-z0-9_./<>*-]*[A-Za-z0-9_])" % TOP)


def check_paths(where, text):
    for match in PATH.finditer(text):
        path = match.group(1)
        if any(c in path for c in "<>*") or "/..." in path:
            continue  # a pattern (bench/results/<run>/), not a path
        if not (root / path).exists():
            problems.append(f"{where}: cites {path}, which does not exist")


docs = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
for doc in docs:
    check_paths(doc.relative_to(root), doc.read_text())

COMMENT = re.compile(r"//(.*)$", re.M)
for folder in ["proto", "common", "storage", "model", "server", "client"]:
    for source in sorted((root / folder).rglob("*")):
        if source.suffix in (".h", ".cc", ".proto"):
            comments = "\n".join(COMMENT.findall(source.read_text()))
            check_paths(source.relative_to(root), comments)


def options(binary, *command):
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", help_of(binary, *command)))


operations = (root / "docs" / "operations.md").read_text()
for row in serve_table(tlpd)[2:]:
    if row not in operations:
        problems.append(f"docs/operations.md: configuration table lacks or differs from: {row} "
                        f"(regenerate: python3 tests/docs_check.py --table TLPD)")

def options_below(binary, *command):
    """The options of a command and of its subcommands, at any depth ("tlpctl model load")."""
    text = help_of(binary, *command)
    found = set(re.findall(r"(--[a-z][a-z0-9-]*)", text))
    section = text.split("Subcommands:")[-1] if "Subcommands:" in text else ""
    for sub in re.findall(r"^\s+([a-z][a-z-]*)\s", section, re.M):
        found |= options_below(binary, *command, sub)
    return found


known = {"tlpd": options_below(tlpd), "tlpctl": options_below(tlpctl)}
# In prose and command lines alike: "tlpd serve ... --flag", "tlpctl topk ... --flag".
INVOCATION = re.compile(r"\b(tlpd|tlpctl)\b([^\n`|]*)")
for doc in docs:
    for match in INVOCATION.finditer(doc.read_text()):
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", match.group(2)):
            if flag not in known[match.group(1)]:
                problems.append(f"{doc.relative_to(root)}: {match.group(1)} has no option {flag}")

for problem in problems:
    print("docs check:", problem)
print(f"docs check: {len(problems)} problems")
sys.exit(1 if problems else 0)
