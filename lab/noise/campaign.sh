#!/usr/bin/env bash
# The plain-gradient-noise campaign: train.py --grad_noise=r against the gate recipe and multi,
# all at the tuned settings (d=64, 750 steps), trained at one commit (7317180) on one machine;
# lab/noise/verdict.md has the verdict (python lab/noise/verdict.py, at HEAD). grad_noise left the
# code after 366017d, whose lab/noise/campaign.sh is this script as it ran, writing results/noise
# (7317180's results/noise/campaign.sh screened r up to 4 only; 8 and 16 followed). To rerun it:
#   git checkout 366017d && bash lab/noise/campaign.sh
# from that checkout's root, with data/topics_byte and data/sft_byte prepared there (about 30 runs
# at 2 jobs of one thread: about 3 hours on 2 cores). This copy, at HEAD, is the record: HEAD's
# lab/frontier.py has no '+n' setting, so it stops here.
if ! grep -q "'n': 'grad_noise'" lab/frontier.py; then
  echo "error: grad_noise left the code: git checkout 366017d, then bash lab/noise/campaign.sh" >&2
  exit 1
fi
set -euo pipefail
T=w100+lr4.5e-3  # the tuned settings (config/cpu_tuned.py)
run() { python lab/frontier.py --results=lab/noise --runs=runs-noise --jobs=2 "$@"; }
# 1. a seed-1 screen of r, beside multi and the gate recipe
run --seeds="(1,)" --models=multi+$T,exit-10-early+$T,multi+$T+n0.5,multi+$T+n1,multi+$T+n2,multi+$T+n4
# (r grew better up to 4 at iter 450 of seed 1: the screen goes on to 8 and 16)
run --seeds="(1,)" --models=multi+$T+n8,multi+$T+n16
# the best r: the lowest val NLL at k=12 at seed 1
R=$(python -c "
import json
nll = {r: next(p['nll'] for p in json.load(open(f'lab/noise/runs/multi+$T+n{r}-s1.json'))['val']['fixed'] if p['t'] == 12) for r in ('0.5', '1', '2', '4', '8', '16')}
print(min(nll, key=nll.get))")
echo "best r at seed 1: $R"
# 2. the best r at 5 seeds beside multi and the gate recipe, on the same batches
run --seeds="(1,2,3,4,5)" --models=multi+$T,exit-10-early+$T,multi+$T+n$R
# 3. is it a looped-model effect? single and the plain transformer, with and without the noise
run --seeds="(1,2,3)" --models=single+$T,single+$T+n$R,plain+$T,plain+$T+n$R
