"""Where the time of a cached decoding step goes, at full depth and under an exit (RESULTS.md,
Performance). Times each tied-block step of the new tokens by its place in its segment (the first
iteration of a segment, or a later one), the stop check (residual) and KVCache.skip, over 256 greedy
tokens.
$ python lab/decode/decode_cost.py out-cpu-v13 resid:0.002
"""
import os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))
import torch
import model as M
import decode as D
from guards import load_checkpoint, parse_exit
from model import GPT
from prepare import get_tokenizer

acc = {}

def timed(owner, name, key=None):
    """Wrap owner.name so that its calls on one new token add their seconds to acc[key]."""
    f = getattr(owner, name)
    def g(*args):
        t0 = time.perf_counter()
        out = f(*args)
        k = key(args) if callable(key) else key or name
        s = acc.setdefault(k, [0.0, 0])
        s[0] += time.perf_counter() - t0
        s[1] += 1
        return out
    setattr(owner, name, g)

timed(M.Loop, 'step', lambda a: ('first iteration' if a[3][1] == 0 else 'later iteration')
      if a[1].size(1) == 1 else 'prompt')
timed(M, 'residual', 'stop check: residual')
timed(D.KVCache, 'skip', 'KVCache.skip')

torch.set_grad_enabled(False)
torch.set_num_threads(1)
model, ckpt = load_checkpoint(os.path.join(sys.argv[1], 'ckpt.pt'), GPT.from_checkpoint)
model.eval()
encode = get_tokenizer(ckpt['meta']['tokenizer'])[0]
start = torch.tensor([encode("Question: Tom has 12 apples and buys 7 more. How many now? A:")])
for exit in [None, parse_exit(sys.argv[2])] * 2:  # the second round is the one printed
    acc.clear()
    t0 = time.perf_counter()
    D.generate(model, start, 256, top_k=1, exit=exit)
    total = (time.perf_counter() - t0) / 256 * 1e3
    parts = '; '.join(f"{k}: {1e6 * s / n:.0f} us x {n / 256:.1f}" for k, (s, n) in acc.items()
                      if k != 'prompt')
    print(f"{'full depth' if exit is None else sys.argv[2]}: {total:.2f} ms/token; {parts}")
