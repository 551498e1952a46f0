#!/usr/bin/env bash
# A real tier (mnist, or fmnist: Fashion-MNIST) on one GPU, timed: every run the scripts need (hooks and evaluation
# included), trained in packs of PACK runs per worker (issue 39's goal: at most 10 minutes on one H100). Prepared to
# run in the device tool's 10-minute call; training stops at $GPU_TIER_SECONDS (590 s; 420 s with DRAW=1) and says
# how many of the tier's runs were done by then.
#
#   python benchmarks/gpu_data.py pack                     # here: data/{mnist,fmnist}.z.npz (40 MB); carry ["data"]
#   bash benchmarks/gpu_tier.sh [PACK [WORKERS [TIER]]]     # there (defaults: 16 runs a pack, 2 workers, mnist)
#   DRAW=1 bash benchmarks/gpu_tier.sh 16 2 fmnist          # there: keep the runs, draw the tier, bring it back
#
# Timing only (default): the tier's cache goes to a temporary folder and is dropped.
# DRAW=1: the cache is the repository's own (paper_figures/out/runs/<tier>: a warm machine keeps it between calls,
# so a second call resumes); once every run is done, each script draws its figure and numbers from it, and
# $OUT/<tier>_out.tar.gz holds each script's folder paper_figures/out/<tier>/<script>/ (no runs). Here: `tar xzf
# <tier>_out.tar.gz -C paper_figures/out`, then commit the scripts the table names drawn (drawing stops at
# $DRAW_SECONDS, 160 s; a script cut off is named failed). A call that ends before the runs are done draws nothing
# and says so: call it again.
# Writes $OUT/gpu_tier.md (one table row, two with DRAW=1) beside the tier's log.
set -u
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" FEDLAB_DATA="${FEDLAB_DATA:-$PWD/data}"
pack="${1:-16}" workers="${2:-2}" tier="${3:-mnist}" out="${OUT:-$(mktemp -d)}" draw="${DRAW:-0}"
py="${PYTHON:-python3}"
if ls "$FEDLAB_DATA"/*.z.npz >/dev/null 2>&1; then "$py" benchmarks/gpu_data.py unpack || exit 2; fi
if [ "$draw" = 1 ]; then cache="$PWD/paper_figures/out"; limit="${GPU_TIER_SECONDS:-420}"
else cache="$(mktemp -d)"; limit="${GPU_TIER_SECONDS:-590}"; fi
# the plan's "N of M runs done" line: field 1 (N, done) or 3 (M, all)
runs() { "$py" -m paper_figures.tier --tier "$tier" --plan --out "$cache" | awk -v f="$1" '/ of .* runs done/ {print $f}'; }
total=$(runs 3)
start=$(date +%s)
timeout "$limit" "$py" -m paper_figures.tier --tier "$tier" --workers "$workers" --pack "$pack" --out "$cache" --quiet \
    > "$out/gpu_tier.log" 2>&1
rc=$?
done_runs=$(runs 1)
card=$("$py" -c "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')")
rows="| $tier tier, packs of $pack, $workers workers | $card | exit $rc | $(( $(date +%s) - start )) s | $done_runs of ${total:-?} runs done |"
if [ "$draw" = 1 ]; then
    start=$(date +%s) drawn=0 failed=""
    if [ "$rc" = 0 ]; then
        for f in $("$py" -c 'from paper_figures.tier import ORDER; print(*ORDER)'); do
            left=$(( ${DRAW_SECONDS:-160} - $(date +%s) + start ))
            if [ "$left" -gt 5 ] && timeout "$left" "$py" -m paper_figures."$f" --tier "$tier" --workers "$workers" \
                --out "$cache" --quiet >> "$out/gpu_tier.log" 2>&1
            then drawn=$((drawn + 1)); else failed="$failed $f"; fi
        done
        dirs=$("$py" -c "from paper_figures import common as C; from paper_figures.tier import ORDER
print(*[d.relative_to('$cache') for n in ORDER if (d := C.out_dir(n, '$tier', '$cache')).is_dir()])")
        tar czf "$out/${tier}_out.tar.gz" -C "$cache" $dirs
        result="$drawn scripts drawn${failed:+, failed:$failed}; ${tier}_out.tar.gz $(du -h "$out/${tier}_out.tar.gz" | cut -f1)"
    else result="nothing drawn: the runs are not all done (call again: the cache is kept while the machine is warm)"; fi
    rows="$rows
| draw every script of the $tier tier | $card | ${failed:+failed}${failed:-ok} | $(( $(date +%s) - start )) s | $result |"
fi
printf '| step | card | status | wall | result |\n|---|---|---|---|---|\n%s\n' "$rows" > "$out/gpu_tier.md"
cat "$out/gpu_tier.md"
