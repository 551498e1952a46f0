#!/usr/bin/env bash
# A real tier (mnist, or fmnist: Fashion-MNIST) on one GPU from an empty cache, timed: every run the scripts need (hooks and evaluation included),
# trained in packs of PACK runs per worker (issue 39's goal: at most 10 minutes on one H100). Prepared to run in the
# device tool's 10-minute call; it stops at 590 s ($GPU_TIER_SECONDS) and says how many of the tier's runs were done by then.
#
#   mkdir -p data && cp ~/.cache/fedlab_analysis/{mnist,fmnist}.npz data/   # here; then carry ["data"] to the GPU
#   bash benchmarks/gpu_tier.sh [PACK [WORKERS [TIER]]]     # there (defaults: 16 runs a pack, 2 workers, mnist)
#
# Writes $OUT/gpu_tier.md (one table row) beside the tier's log; the tier's cache goes to a temporary folder.
set -u
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" FEDLAB_DATA="${FEDLAB_DATA:-$PWD/data}"
pack="${1:-16}" workers="${2:-2}" tier="${3:-mnist}" out="${OUT:-$(mktemp -d)}" cache="$(mktemp -d)"
py="${PYTHON:-python3}"
total=$("$py" -m paper_figures.tier --tier "$tier" --plan --out "$cache" | sed -n 's/^0 of \([0-9]*\) runs done.*/\1/p')
start=$(date +%s)
timeout "${GPU_TIER_SECONDS:-590}" "$py" -m paper_figures.tier --tier "$tier" --workers "$workers" --pack "$pack" --out "$cache" --quiet \
    > "$out/gpu_tier.log" 2>&1
rc=$?
done_runs=$(find "$cache/runs/$tier" -name done.json 2>/dev/null | wc -l)
card=$("$py" -c "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')")
row="| $tier tier from an empty cache, packs of $pack, $workers workers | $card | exit $rc | $(( $(date +%s) - start )) s | $done_runs of ${total:-?} runs done |"
printf '| step | card | status | wall | result |\n|---|---|---|---|---|\n%s\n' "$row" > "$out/gpu_tier.md"
cat "$out/gpu_tier.md"
