#!/usr/bin/env bash
# tlpd's training speed beside the Python reference, measured in the same run on the same file.
#
# The reference is DyGLib's TGN (Yu et al., NeurIPS 2023), which the caller brings: this script
# fetches nothing and builds nothing of it, it runs DYGLIB_DIR's train_link_prediction.py in a
# scratch folder on the same stream, featureless (DyGLib pads to its 172 zero dimensions), in
# tlpd's default shape (1 attention layer over the 10 most recent neighbours, batch 200, time
# encoding 100; DyGLib's own defaults, 2 layers over 20, cost ~40x more per batch) on Debian's
# PyTorch. Both sides train one epoch; the figure is training events per second of that epoch's
# training loop (DyGLib: its training interactions over the training bar's elapsed time; tlpd:
# `tlpd train`'s own epoch figure). Prints both and their ratio, and writes OUT_DIR/peer.json.
#
# Usage: bash bench/peer.sh DYGLIB_DIR [DATA] [OUT_DIR]
#   DATA: a JODIE-format bipartite stream (header u,i,ts,label; gzip or plain), default the
#   bundled data/wikipedia.csv.gz. OUT_DIR default bench/results/<date>-peer-<host>.
# Env: TLP_BUILD_DIR (default build). About 6 minutes on the 2-core machine (DyGLib also
# evaluates after its epoch; that part is not timed).
set -euo pipefail
cd "$(dirname "$0")/.."
dyglib=${1:?usage: bash bench/peer.sh DYGLIB_DIR [DATA] [OUT_DIR]}
dyglib=$(cd "$dyglib" && pwd)
data=$(realpath "${2:-data/wikipedia.csv.gz}")
out=${3:-bench/results/$(date +%F)-peer-$(hostname)}
tlpd=${TLP_BUILD_DIR:-build}/server/tlpd
[[ -f $dyglib/train_link_prediction.py ]] ||
  { echo "bench/peer.sh: $dyglib is not a DyGLib checkout" >&2; exit 1; }
[[ -x $tlpd ]] || { echo "bench/peer.sh: $tlpd missing: run scripts/build.sh" >&2; exit 1; }

# DyGLib's Python dependencies, from Debian's archive like everything else here.
packages=(python3-torch python3-numpy python3-pandas python3-tqdm python3-sklearn python3-tabulate)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if ((${#missing[@]})); then
  SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for part in models utils train_link_prediction.py evaluate_models_utils.py; do
  ln -s "$dyglib/$part" "$work/$part"
done

# DyGLib's preprocess_data.py, for a featureless bipartite stream: ids reindexed from 1, pages
# after users; one zero column of edge features (DyGLib pads it to 172).
mkdir -p "$work/processed_data/wikipedia"
/usr/bin/python3 - "$data" "$work/processed_data/wikipedia" <<'EOF'
import sys, numpy as np, pandas as pd
df = pd.read_csv(sys.argv[1], usecols=[0, 1, 2, 3])
df.columns = ["u", "i", "ts", "label"]
assert df.ts.is_monotonic_increasing, "the stream must be sorted by ts"
users = df.u.max() + 1
out = pd.DataFrame({"u": df.u + 1, "i": df.i - df.i.min() + users + 1, "ts": df.ts.astype(float),
                    "label": df.label.astype(float), "idx": np.arange(1, len(df) + 1)})
out.to_csv(f"{sys.argv[2]}/ml_wikipedia.csv")
np.save(f"{sys.argv[2]}/ml_wikipedia.npy", np.zeros((len(df) + 1, 1)))
np.save(f"{sys.argv[2]}/ml_wikipedia_node.npy", np.zeros((max(out.u.max(), out.i.max()) + 1, 172)))
EOF

echo "== DyGLib TGN, 1 epoch" >&2
# Python 3.11's random.sample refuses the set DyGLib passes it (3.9-3.10 only warned): the shim
# hands it a sorted list instead; nothing else of DyGLib's code or settings changes.
(cd "$work" && /usr/bin/python3 - --dataset_name wikipedia --model_name TGN --num_runs 1 \
  --num_epochs 1 --test_interval_epochs 1000 --num_layers 1 --num_neighbors 10 \
  > "$work/dyglib.log" 2>&1 <<'PY'
import random, runpy, sys
sample = random.sample
random.sample = lambda population, k, **kw: sample(
    sorted(population) if isinstance(population, (set, frozenset)) else population, k, **kw)
sys.argv[0] = "train_link_prediction.py"
sys.path.insert(0, ".")
runpy.run_path("train_link_prediction.py", run_name="__main__")
PY
) || { tail -20 "$work/dyglib.log" >&2; exit 1; }
cp "$work/dyglib.log" "$out/dyglib.log"

echo "== tlpd train, 1 epoch" >&2
"$tlpd" train --data "$data" --epochs 1 --no-eval --out "$work/model.pt" \
  --json-out "$out/tlpd-train.json" > "$out/tlpd-train.log" 2>&1

/usr/bin/python3 - "$out" <<'EOF'
import json, re, sys
out = sys.argv[1]
log = open(f"{out}/dyglib.log").read()
events = int(re.search(r"The training dataset has (\d+) interactions", log).group(1))
# tqdm's final state of the training bar: "N/N [MM:SS<00:00" (or H:MM:SS).
bars = re.findall(r"train for the \d+-th batch.*?(\d+)/(\d+) \[([\d:]+)<", log)
done = [b for b in bars if b[0] == b[1]]
fields = [int(x) for x in done[-1][2].split(":")]
seconds = sum(v * 60 ** i for i, v in enumerate(reversed(fields)))
dyglib = events / seconds
tlpd = json.load(open(f"{out}/tlpd-train.json"))["epochs"][0]["events_per_second"]
result = {"dyglib_tgn_events_per_second": dyglib, "dyglib_train_events": events,
          "dyglib_train_seconds": seconds, "tlpd_events_per_second": tlpd, "ratio": tlpd / dyglib}
json.dump(result, open(f"{out}/peer.json", "w"), indent=1)
print(f"training events/s, one epoch: DyGLib TGN {dyglib:,.0f} ({events} events in {seconds} s), "
      f"tlpd {tlpd:,.0f}: ratio {tlpd / dyglib:.1f}x")
EOF
