#!/usr/bin/env bash
# The multi-depth-supervision variants' campaign: weighted toward the deep depths, in a curriculum,
# or with a consistency loss, against multi and single, all at the tuned settings (d=64, 750
# steps), trained at one commit (0530f8b) on one machine; python lab/depthsup/verdict.py (at HEAD)
# writes the verdict (lab/depthsup/verdict.md) and checks that multi and single trained here
# measure exactly as the noise campaign's (lab/noise, at 7317180). The variants left the code
# after c97602b, whose lab/depthsup/campaign.sh is this script as it ran, writing
# results/depthsup. To rerun it:
#   git checkout c97602b && bash lab/depthsup/campaign.sh
# from that checkout's root, with data/topics_byte and data/sft_byte prepared there (about 28 runs
# at 2 jobs of one thread: about 2.5 hours on 2 cores); one variant at a seed of your own there:
# python lab/frontier.py --seeds="(9,)" --models=weighted-2+w100+lr4.5e-3 --results=out-x
# --runs=out-x/runs (multi and single run at HEAD too). This copy, at HEAD, is the record.
if ! grep -q "weighted-" lab/frontier.py; then
  echo "error: the variants left the code: git checkout c97602b, then bash lab/depthsup/campaign.sh" >&2
  exit 1
fi
set -euo pipefail
T=w100+lr4.5e-3  # the tuned settings (config/cpu_tuned.py)
run() { python lab/frontier.py --results=lab/depthsup --runs=runs-depthsup --jobs=2 "$@"; }
# 1. a seed-1 screen of each family, beside multi and single
run --seeds="(1,)" --models=multi+$T,single+$T,weighted-1+$T,weighted-2+$T,deep-first+$T,shallow-first+$T,consist-0.1+$T,consist-1+$T,consist-10+$T
# each family's pick: the lowest val NLL at the trained depth (k=12) at seed 1
pick() {
  python -c "
import json, sys
nll = lambda arm: next(p['nll'] for p in json.load(open(f'lab/depthsup/runs/{arm}+$T-s1.json'))['val']['fixed'] if p['t'] == 12)
print(min(sys.argv[1:], key=nll))" "$@"
}
W=$(pick weighted-1 weighted-2); C=$(pick deep-first shallow-first); K=$(pick consist-0.1 consist-1 consist-10)
echo "picks at seed 1: $W $C $K"
# 2. the picks beside multi and single at 5 seeds, on the same batches: 3 seeds first; then
# seeds 4-5 of multi and the picks; single's last
ARMS=multi+$T,$W+$T,$C+$T,$K+$T
run --seeds="(1,2,3)" --models=$ARMS,single+$T
run --seeds="(1,2,3,4,5)" --models=$ARMS
run --seeds="(1,2,3,4,5)" --models=$ARMS,single+$T
# 3. the findings page over every run, and the verdict
python lab/frontier.py --results=lab/depthsup --from_runs=True
python lab/depthsup/verdict.py
