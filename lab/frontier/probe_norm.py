# Why the relative residual's r with NLL is negative: r of each part, over the real tokens of the
# held-out documents at the trained depth (|z_(k-1)| = moved / resid).
# $ PYTHONPATH=. python lab/frontier/probe_norm.py out-cpu-single out-cpu-multi
import sys, os, numpy as np, torch, eval as ev
from guards import load_checkpoint
from model import GPT
from prepare import get_tokenizer, read_eval_docs
for out_dir in sys.argv[1:]:
    model, ckpt = load_checkpoint(os.path.join(out_dir, 'ckpt.pt'), GPT.from_checkpoint)
    model.eval()
    encode, _, eot = get_tokenizer(ckpt['meta']['tokenizer'])
    docs, _ = read_eval_docs(os.path.join('data', ckpt['config']['dataset'], 'eval.jsonl'))
    x, real = ev.pack_docs([encode(d['text']) for d in docs], eot, model.config.block_size)
    nll, depth, resid, moved, entropy = ev.score(model, x, 8)  # one column a prediction
    norm = moved / resid.clamp_min(1e-12)
    m = real[:, 1:]
    r = lambda s: np.corrcoef(s[m].numpy(), nll[m].numpy())[0, 1]
    print(f"{out_dir}: r with NLL of |z_(k-1)| {r(norm):+.3f}, |z_k - z_(k-1)| {r(moved):+.3f}, "
          f"relative {r(resid):+.3f}, entropy {r(entropy):+.3f}")
