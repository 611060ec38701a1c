#!/usr/bin/env bash
# CI check of deploy/: promtool on the Prometheus config and alert rules (with their unit tests),
# then the offline structure checks of the Dockerfiles, compose, Grafana and Kubernetes files.
set -euo pipefail
root=${1:?usage: deploy_check.sh SOURCE_DIR}
cd "$root/deploy"
promtool check config prometheus.yml
promtool check rules alerts.yml
promtool test rules alerts_test.yml
/usr/bin/python3 "$root/tests/deploy_check.py" "$root"
