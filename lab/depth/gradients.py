"""What the exit gate's loss does to the language model's update, early in training: exit-10 at
the screen's shape (config/cpu_exit.py, exit_beta=10, 750 steps, seed 1), trained as train.py
trains it (its batches, schedule, AdamW and clip groups). Every 10th step up to 300, the gradient
on the language model's parameters (all but the gate) is split in two: g_nll, of the expected NLL
sum_t p_t NLL_t (the loss at exit_beta=0, on the same batch), and g_gate = g_total - g_nll, of the
gate's entropy bonus -exit_beta * H(p), which reaches them through the states. Writes
lab/depth/gradients.txt, never over one there.
$ OMP_NUM_THREADS=1 python lab/depth/gradients.py"""
import math
import os
import sys
import numpy as np
import torch

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..')
sys.path.insert(0, root)
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # lab/
import page
write = page.measured(os.path.join(root, 'lab', 'depth', 'gradients.txt'))
from model import GPT, GPTConfig  # noqa: E402
from prepare import load_meta, load_tokens  # noqa: E402

c = {}
exec(open(os.path.join(root, 'config', 'cpu_single.py')).read(), {}, c)
c.update(supervise=(1, 2, 4, 8, 12), exit_gate=True, exit_beta=10.0, max_iters=750,
         lr_decay_iters=750, seed=1337)  # frontier's exit-10 at seed 1: --seed=1
c['seed'] = 1
data_dir = os.path.join(root, 'data', c['dataset'])
meta, data = load_meta(data_dir), load_tokens(data_dir, 'train')
torch.manual_seed(c['seed'])
fields = GPTConfig.__dataclass_fields__
model = GPT(GPTConfig(**{k: v for k, v in c.items() if k in fields}, vocab_size=meta['vocab_size']))
opt = model.configure_optimizers(0.1, c['learning_rate'], (0.9, 0.95), 'cpu')
lm = [p for n, p in model.named_parameters() if 'gate' not in n]
gate = [p for n, p in model.named_parameters() if 'gate' in n]

def lr_at(it):  # train.py's get_lr
    if it < c['warmup_iters']:
        return c['learning_rate'] * (it + 1) / (c['warmup_iters'] + 1)
    ratio = (it - c['warmup_iters']) / (c['lr_decay_iters'] - c['warmup_iters'])
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return c['min_lr'] + coeff * (c['learning_rate'] - c['min_lr'])

def lm_grad(beta, x, y):  # -> the gradient on the LM's parameters of the loss at this beta
    model.exit_gate.c.exit_beta = beta
    model.zero_grad(set_to_none=True)
    _, loss, _ = model(x, y)
    loss.backward()
    return torch.cat([p.grad.flatten() for p in lm]), loss.item()

T = c['block_size']
lines = ['step | loss | |g_total| | |g_nll| | |g_gate| | |g_gate|/|g_nll| | cos(g_gate, g_nll) | '
         'LM clip scale']
for it in range(301):
    step_seed = (c['seed'] << 32) + it  # train.py's batch of this step
    g = torch.Generator().manual_seed(step_seed)
    torch.manual_seed(step_seed)
    ix = torch.randint(len(data) - T, (1, c['batch_size']), generator=g)[0]
    xy = torch.stack([torch.from_numpy(data[i:i + T + 1].astype(np.int64)) for i in ix.tolist()])
    x, y = xy[:, :-1], xy[:, 1:]
    if it % 10 == 0:
        g_nll, _ = lm_grad(0.0, x, y)
        g_total, loss = lm_grad(10.0, x, y)
        g_gate = g_total - g_nll
        cos = torch.dot(g_gate, g_nll) / (g_gate.norm() * g_nll.norm())
        scale = min(1.0, 1.0 / g_total.norm().item())  # grad_clip 1.0
        lines.append(f"{it} | {loss:.4f} | {g_total.norm():.3f} | {g_nll.norm():.3f} | "
                     f"{g_gate.norm():.3f} | {g_gate.norm() / g_nll.norm():.2f} | "
                     f"{cos:+.2f} | {scale:.2f}")
        print(lines[-1], flush=True)
    else:
        lm_grad(10.0, x, y)
    for group in opt.param_groups:
        group['lr'] = lr_at(it)
    for params in (lm, gate):  # train.py's clip groups
        torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
write('\n'.join(lines) + '\n')
