#!/usr/bin/env python3
"""Offline checks of everything under deploy/ and of the Dockerfiles (no Docker engine or
cluster runs on our machines): each file parses, and the keys that make it work are there.

Usage: deploy_check.py SOURCE_DIR. Exits non-zero with one line per problem."""
import fnmatch
import json
import pathlib
import re
import sys

import yaml

root = pathlib.Path(sys.argv[1])
problems = []


def check(condition, message):
    if not condition:
        problems.append(message)


# --- Dockerfiles: a small parser (hadolint is not packaged for Debian 12) ---
INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT",
                "VOLUME", "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}


def parse_dockerfile(path):
    """Returns [(instruction, arguments)] with continuation lines joined."""
    instructions, pending = [], ""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip("\\").strip() + " " if line.endswith("\\") else line.strip()
        if line.endswith("\\"):
            continue
        word, _, arguments = pending.partition(" ")
        check(word.upper() in INSTRUCTIONS, f"{path.name}:{number}: unknown instruction {word}")
        check(word == word.upper(), f"{path.name}:{number}: write instructions in upper case")
        instructions.append((word.upper(), arguments.strip()))
        pending = ""
    check(not pending, f"{path.name}: ends inside a continued line")
    return instructions


for dockerfile in [root / "Dockerfile", root / "deploy" / "Dockerfile.cuda"]:
    steps = parse_dockerfile(dockerfile)
    name = dockerfile.relative_to(root)
    first = next((i for i, (word, _) in enumerate(steps) if word != "ARG"), None)
    check(first is not None and steps[first][0] == "FROM", f"{name}: must start with FROM")
    stages = [i for i, (word, _) in enumerate(steps) if word == "FROM"]
    check(len(stages) >= 2, f"{name}: must be multi-stage (build, then runtime)")
    for word, arguments in steps:
        if word == "FROM":
            check(":latest" not in arguments and ":" in arguments.split()[0],
                  f"{name}: pin the base image tag ({arguments})")
        if word == "RUN" and "apt-get install" in arguments:
            check("--no-install-recommends" in arguments,
                  f"{name}: apt-get install without --no-install-recommends")
            check("rm -rf /var/lib/apt/lists" in arguments,
                  f"{name}: apt lists left in the layer")
    build = steps[stages[0]:stages[-1]]
    runtime = steps[stages[-1]:]
    build_runs = " ; ".join(arguments for word, arguments in build if word == "RUN")
    # The image builds with exactly the scripts CI runs (scripts/test.sh calls both).
    check("bash scripts/setup.sh" in build_runs, f"{name}: build stage must run scripts/setup.sh")
    check("bash scripts/build.sh" in build_runs, f"{name}: build stage must run scripts/build.sh")
    users = [arguments for word, arguments in runtime if word == "USER"]
    check(users and users[-1] not in ("root", "0"), f"{name}: the final stage must not run as root")
    check(any(word == "HEALTHCHECK" and "health" in arguments for word, arguments in runtime),
          f"{name}: HEALTHCHECK through the gRPC health service missing")
    exposed = " ".join(arguments for word, arguments in runtime if word == "EXPOSE").split()
    check("50051" in exposed and "9464" in exposed, f"{name}: must expose 50051 and 9464")
    check(any(word == "VOLUME" and "/var/lib/tlpd" in arguments for word, arguments in runtime),
          f"{name}: data volume /var/lib/tlpd missing")
# The build context: local build trees and stores stay out, what the build stage needs stays in.
ignore = root / ".dockerignore"
check(ignore.exists(), ".dockerignore missing: docker build would send every local build tree")
if ignore.exists():
    patterns = [line.strip() for line in ignore.read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    for needed in ("build*/", ".git", "tlpd-data/"):
        check(needed in patterns, f".dockerignore: {needed} not excluded")
    for kept in ("data", "scripts", "proto", "CMakeLists.txt", "server", "model"):
        check(not any(fnmatch.fnmatch(kept, p.rstrip("/")) for p in patterns),
              f".dockerignore excludes {kept}, which the build stage needs")
test_script = (root / "scripts" / "test.sh").read_text()
check("bash scripts/setup.sh" in test_script and "bash scripts/build.sh" in test_script,
      "scripts/test.sh must run the same setup and build scripts as the Dockerfile")

# --- metric names tlpd exports, for the dashboard and the alerts ---
exported = set(re.findall(r'"(tlpd_[a-z_]+)"', (root / "server" / "metrics.cc").read_text()))
serve_source = (root / "server" / "serve_command.cc").read_text()
check(len(exported) > 10, "could not read the metric names from server/metrics.cc")


def metrics_in(expression):
    names = set()
    for name in re.findall(r"\btlpd_[a-z_]+", expression):
        names.add(re.sub(r"_(bucket|sum|count)$", "", name))
    return names


# --- docker compose ---
compose = yaml.safe_load((root / "deploy" / "docker-compose.yml").read_text())
check(set(compose.get("services", {})) >= {"tlpd", "prometheus", "grafana"},
      "docker-compose.yml: services tlpd, prometheus and grafana expected")
for service in compose.get("services", {}).values():
    for volume in service.get("volumes", []):
        source = volume.split(":")[0]
        if source.startswith("."):
            check((root / "deploy" / source).exists(), f"docker-compose.yml: {source} does not exist")
# Prometheus is built from Debian's package: no registry needs to be reachable to run compose's
# tlpd and prometheus services (scripts/docker_check.sh runs them).
prometheus_service = compose.get("services", {}).get("prometheus", {})
prometheus_build = prometheus_service.get("build")
check(isinstance(prometheus_build, str) and (root / "deploy" / prometheus_build / "Dockerfile").exists(),
      "docker-compose.yml: the prometheus service must build deploy/prometheus/Dockerfile")
if isinstance(prometheus_build, str) and (root / "deploy" / prometheus_build / "Dockerfile").exists():
    steps = parse_dockerfile(root / "deploy" / prometheus_build / "Dockerfile")
    check(any(word == "RUN" and "apt-get install" in arguments and " prometheus" in arguments
              for word, arguments in steps),
          "deploy/prometheus/Dockerfile: must install Debian's prometheus package")
    check(any(word == "USER" and arguments not in ("root", "0") for word, arguments in steps),
          "deploy/prometheus/Dockerfile: must not run as root")
storage = [v for v in prometheus_service.get("volumes", []) if not v.startswith(".")]
check(any(v.split(":")[1] == "/var/lib/prometheus" for v in storage),
      "docker-compose.yml: prometheus needs a volume at /var/lib/prometheus (its storage path)")
check(any("--storage.tsdb.path=/var/lib/prometheus/" in c for c in prometheus_service.get("command", [])),
      "docker-compose.yml: prometheus must keep its TSDB in the /var/lib/prometheus volume")
prometheus = yaml.safe_load((root / "deploy" / "prometheus.yml").read_text())
targets = [t for job in prometheus["scrape_configs"] for c in job["static_configs"] for t in c["targets"]]
check("tlpd:9464" in targets, "prometheus.yml: must scrape the compose service tlpd:9464")

# --- Grafana ---
dashboard = json.loads((root / "deploy" / "grafana" / "dashboards" / "tlpd.json").read_text())
titles = " ".join(panel["title"].lower() for panel in dashboard["panels"])
for wanted in ["ingest rate", "queue depth", "score latency", "batch sizes", "representation_norm",
               "effective_neighbors", "rocksdb", "errors"]:
    check(wanted in titles, f"tlpd.json: no panel about {wanted}")
for panel in dashboard["panels"]:
    check(panel.get("targets"), f"tlpd.json: panel {panel['title']} has no query")
    for target in panel.get("targets", []):
        for name in metrics_in(target["expr"]):
            check(name in exported, f"tlpd.json: panel {panel['title']} uses {name}, not exported")
provisioning = yaml.safe_load(
    (root / "deploy" / "grafana" / "provisioning" / "dashboards" / "tlpd.yml").read_text())
mounted = [v.split(":")[1] for v in compose["services"]["grafana"]["volumes"] if "dashboards:" in v]
check(provisioning["providers"][0]["options"]["path"] in mounted,
      "grafana dashboard provider path is not where compose mounts the dashboards")

# --- alerts use exported metrics ---
alerts = yaml.safe_load((root / "deploy" / "alerts.yml").read_text())
names = {rule["alert"] for group in alerts["groups"] for rule in group["rules"]}
check({"TlpdDown", "TlpdIngestErrors", "TlpdScoreLatencySLO", "TlpdCheckpointTooOld"} <= names,
      "alerts.yml: daemon down, ingest errors, latency SLO and checkpoint age alerts expected")
for group in alerts["groups"]:
    for rule in group["rules"]:
        for name in metrics_in(rule["expr"]):
            check(name in exported, f"alerts.yml: {rule['alert']} uses {name}, not exported")

# --- Kubernetes: every manifest (single daemon, Kafka replicas) ---
for manifest in sorted((root / "deploy" / "k8s").glob("*.yaml")):
    name = f"k8s/{manifest.name}"
    documents = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    kinds = {d["kind"]: d for d in documents}
    check(set(kinds) >= {"StatefulSet", "Service", "ServiceMonitor"},
          f"{name}: StatefulSet, Service and ServiceMonitor expected")
    for document in documents:
        check("apiVersion" in document and "metadata" in document and "spec" in document,
              f"{name}: {document.get('kind')} lacks apiVersion, metadata or spec")
    if "StatefulSet" in kinds:
        spec = kinds["StatefulSet"]["spec"]
        check(spec.get("volumeClaimTemplates"), f"{name}: StatefulSet has no volume claim template")
        check(spec["selector"]["matchLabels"].items()
              <= spec["template"]["metadata"]["labels"].items(),
              f"{name}: StatefulSet selector does not match the pod labels")
        container = spec["template"]["spec"]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        check(ports == {"grpc": 50051, "metrics": 9464},
              f"{name}: StatefulSet ports grpc 50051, metrics 9464")
        for probe in ["readinessProbe", "livenessProbe"]:
            check(container.get(probe, {}).get("grpc", {}).get("port") == 50051,
                  f"{name}: {probe} must use the gRPC health service on 50051")
        # Liveness must not wait for readiness: a first start trains for minutes.
        check(container["livenessProbe"]["grpc"].get("service") == "liveness",
              f"{name}: livenessProbe must ask the 'liveness' service, not readiness")
        check(container.get("resources", {}).get("requests"), f"{name}: no resource requests")
        mounts = [m["mountPath"] for m in container.get("volumeMounts", [])]
        check("/var/lib/tlpd" in mounts, f"{name}: data volume not mounted at /var/lib/tlpd")
        env = {e["name"]: e for e in container.get("env", [])}
        # Every TLPD_* variable must be one `tlpd serve` reads: TLPD_X_Y for each option
        # --x-y (server/serve_command.cc, BindEnvironment).
        for variable in env:
            if variable.startswith("TLPD_"):
                flag = "--" + variable[len("TLPD_"):].lower().replace("_", "-")
                check(f'"{flag}"' in serve_source or f'"!{flag}"' in serve_source,
                      f"{name}: tlpd reads no {variable} (no option {flag})")
        if "TLPD_KAFKA_BROKERS" in env:
            check("$(POD_NAME)" in env.get("TLPD_KAFKA_GROUP", {}).get("value", ""),
                  f"{name}: each Kafka replica needs its own consumer group (TLPD_KAFKA_GROUP)")
    if "Service" in kinds and "ServiceMonitor" in kinds:
        service_ports = {p["name"] for p in kinds["Service"]["spec"]["ports"]}
        for endpoint in kinds["ServiceMonitor"]["spec"]["endpoints"]:
            check(endpoint["port"] in service_ports,
                  f"{name}: ServiceMonitor port not named in the Service")

for problem in problems:
    print("deploy check:", problem)
print(f"deploy check: {len(problems)} problems")
sys.exit(1 if problems else 0)
