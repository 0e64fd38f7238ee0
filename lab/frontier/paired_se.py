# The multi-depth model's resid selection exit against the same mean compute spent uniformly at
# random between the two whole depths around it, paired on the same tokens; SE over the 160 val
# rows.
# $ python lab/frontier/paired_se.py
import os, sys
lab = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(lab), lab]  # the repository root's modules, and lab/frontier.py
import torch, eval as ev, frontier as fr
from guards import load_checkpoint
from model import GPT
from prepare import load_tokens
fr.batch_size = 16
m, ck = load_checkpoint('out-cpu-multi/ckpt.pt', GPT.from_checkpoint); m.eval()
rows = ev.val_rows(load_tokens('data/topics_byte', 'val'), 128, 10 * 16, 1337)
nll, maxprob, resid = fr.every_depth(m, rows)
for t in (0.1, 0.05):
    chosen, depth = fr.select(nll, resid < t)
    # the same mean compute spent uniformly at random between the two whole depths around it
    d = depth.float().mean().item(); lo = int(d); p = d - lo
    mix = (1 - p) * nll[lo - 1] + p * nll[lo]
    diff = chosen - mix
    # rows as the unit: tokens in a row are not independent
    per_row = diff.view(len(rows), -1).mean(1)
    se = per_row.std() / len(per_row) ** 0.5
    print(f"t={t}: mean depth {d:.3f}, diff {diff.mean():+.4f}, SE over rows {se:.4f}")
