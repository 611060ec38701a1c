#!/usr/bin/env bash
# `tlpd train --monitor-plot`: every epoch of the run JSON holds each attention head's energy
# field and key figures within the invariants and the link outcome's attention, the log prints
# them, and the SVG is drawn.
set -euo pipefail
tlpd=${1:?usage: train_monitor_test.sh TLPD}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }
{
  echo "src,dst,ts"
  for i in $(seq 0 1499); do echo "$((i % 40)),$((100 + (i * 7) % 15)),$i"; done
} > "$work/events.csv"
"$tlpd" train --data "$work/events.csv" --epochs 2 --patience 2 --layers 2 --memory-dim 16 \
  --embedding-dim 16 --time-dim 16 --threads 1 --no-eval --selection-queries 50 \
  --monitor-plot "$work/monitor.svg" --json-out "$work/run.json" --out "$work/model.pt" \
  > "$work/train.log" 2>&1 || { cat "$work/train.log"; fail "training"; }
python3 - "$work/run.json" <<'PY' || fail "the run JSON"
import json, sys
epochs = json.load(open(sys.argv[1]))["epochs"]
assert len(epochs) == 2, epochs
for epoch in epochs:
    heads = epoch["attention"]
    assert sorted((h["module"], h["head"]) for h in heads) == [
        ("attention0", 0), ("attention0", 1), ("attention1", 0), ("attention1", 1)], heads
    for h in heads:
        assert 1 <= h["rank"] <= h["rank_bound"] <= 8, h  # head_dim 16 / 2 heads
        assert h["row_sum_residual"] < 1e-9, h
        assert 0 <= h["query_share"] <= 1 and h["key_coherence"] >= 1, h
        assert h["spectrum"][0] == 1.0 and len(h["spectrum"]) == 8, h
    # The link outcome's attention (a link-only model has no other).
    (outcome,) = epoch["outcomes"]
    assert outcome["outcome"] == "link" and len(outcome["query_norms"]) == 2, outcome
    assert 0 <= outcome["normalised_entropy"] <= 1 and outcome["effective_neighbors"] > 0, outcome
PY
[ "$(grep -c "head [01]: energy field rank" "$work/train.log")" = 8 ] || {
  cat "$work/train.log"; fail "the log should print 2 epochs x 4 heads"; }
grep -q "<svg" "$work/monitor.svg" || fail "no SVG"
grep -q "query share of the field" "$work/monitor.svg" || fail "the SVG lacks its panels"
# Without --monitor, no attention figures.
"$tlpd" train --data "$work/events.csv" --epochs 1 --memory-dim 16 --embedding-dim 16 \
  --time-dim 16 --threads 1 --no-eval --json-out "$work/plain.json" --out "$work/model.pt" \
  > "$work/train.log" 2>&1 || { cat "$work/train.log"; fail "training without the monitor"; }
python3 -c "import json,sys; e = json.load(open(sys.argv[1]))['epochs'][0]; assert 'attention' not in e and 'outcomes' not in e" \
  "$work/plain.json" || fail "attention figures without --monitor"
echo "train_monitor: ok"
