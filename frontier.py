"""
The depth frontier: val NLL against the mean loop iterations per token, for every depth policy, on
models of one shape ([2 std][A x12][2 std], d=64), data (byte topics) and schedule (1,500 steps).
Trains the models it lacks (and resumes the ones whose run stopped early), measures every policy on
the same val rows, and writes frontier.json, frontier.md (the table) and frontier.svg (one chart per
policy) to out-frontier/ (--results=results/frontier: over the committed results):
$ python prepare.py --dataset=topics --tokenizer=byte && python frontier.py
The policies:
- fixed: every token runs k iterations (k = 1..12);
- frozen exit (maxprob, resid): a token stops at its first confident step and its state is frozen
  while later tokens still attend to it; this is what saves compute;
- selection exit: every token runs all 12; each takes the logits of its first confident depth:
  the policy's upper bound, with no saving;
- ACT: the gate's own depth, at three halt penalties.
Each point is compared with the best fixed depth of any model at the same mean depth.
"""
import os
import sys
import json
import subprocess
import numpy as np
import torch
import torch.nn.functional as F
import eval as ev
from model import load_checkpoint
from prepare import check_output, load_tokens

MODELS = {  # name -> (out_dir, train.py arguments): the same shape, data and steps
    'single-depth': ('out-cpu-single', ['config/cpu_single.py']),
    'multi-depth': ('out-cpu-multi', ['config/cpu_multi.py']),
    'random depth': ('out-cpu-random', ['config/cpu_random.py']),
    'per-token depth': ('out-cpu-token', ['config/cpu_token.py']),
    **{f'ACT {hp}': (f'out-cpu-act-{hp}', ['config/cpu_act.py', f'--halt_penalty={hp}',
                                          f'--out_dir=out-cpu-act-{hp}'])
       for hp in (0.001, 0.003, 0.01)},
}
THRESHOLDS = {'maxprob': (0.3, 0.5, 0.7, 0.8, 0.9), 'resid': (0.2, 0.1, 0.05, 0.02)}
COLOURS = ['steelblue', 'crimson', 'darkorange', 'seagreen', 'purple', 'gray', 'black']
train_args = ''  # more train.py arguments for every model (a quick run: '--max_iters=100')
results = 'out-frontier'  # results/frontier holds the committed ones: write there on purpose
eval_iters = 10  # val batches of batch_size rows
batch_size = 16
device = 'cpu'
_valid = ['eval_iters >= 1', 'batch_size >= 1', "results != ''"]

def train(out_dir, args):
    """python train.py args, unless out_dir holds a finished run (one that stopped early is resumed:
    it is never measured half-trained); its log goes to results/."""
    what, why = 'training', ''
    if os.path.exists(path := os.path.join(out_dir, 'ckpt.pt')):
        ckpt = torch.load(path, map_location='cpu', weights_only=True)
        done, goal = ckpt['iter_num'], ckpt['config']['max_iters']
        if done >= goal:
            return
        what, why = 'resuming', f" (it stopped at iter {done} of {goal})"
        args = [*args, '--init_from=resume']
    log = os.path.join(results, f'train_{os.path.basename(out_dir)}.log')
    print(f"{what} {out_dir}{why}: python train.py {' '.join(args)} {train_args} > {log}",
          flush=True)
    here = os.path.dirname(os.path.abspath(__file__))  # train.py and config/ (run from any folder)
    args = [os.path.join(here, a) for a in ['train.py', *args] if a.endswith('.py')] + \
        [a for a in args if not a.endswith('.py')] + train_args.split()
    with open(log, 'a' if why else 'w') as f:
        r = subprocess.run([sys.executable, *args], stdout=f, stderr=subprocess.STDOUT)
    if r.returncode:
        raise ValueError(f"training {out_dir} failed (exit {r.returncode}): see {log}")

@torch.no_grad()
def every_depth(model, rows):
    """-> nll, maxprob, resid (K, N): each predicting token at every fixed depth k = 1..K."""
    out = []
    for k in range(1, model.config.loops[0] + 1):
        per_batch = []
        for xb in rows.split(batch_size):
            logits, _, info = model(xb.to(device), n_loops=k)
            logits, targets = logits[:, :-1].float(), xb[:, 1:].to(device)
            nll = F.cross_entropy(logits.transpose(1, 2), targets, reduction='none')
            maxprob = logits.softmax(-1).amax(-1)
            per_batch.append((nll.flatten(), maxprob.flatten(), info['resid'][:, :-1].flatten()))
        out.append([torch.cat(column).cpu() for column in zip(*per_batch)])
    return [torch.stack(column) for column in zip(*out)]

def select(nll, confident):
    """The selection exit: nll, confident (K, N) at depths 1..K -> each token's NLL and depth at
    its first confident depth (the last one if it is never confident)."""
    first = torch.where(confident.any(0), confident.float().argmax(0), len(nll) - 1)
    return nll.gather(0, first[None])[0], first + 1

def policies(model, rows):
    """-> {policy: [(threshold or k, mean depth, NLL)]} of one model."""
    if model.config.act:
        nll, depth = ev.val_nll(model, rows, batch_size)
        return {'ACT': [(model.config.halt_penalty, depth, nll)]}
    nll, maxprob, resid = every_depth(model, rows)
    out = {'fixed': [(k + 1, k + 1.0, n.item()) for k, n in enumerate(nll.mean(1))]}
    for kind, t_all in THRESHOLDS.items():
        signal = {'maxprob': lambda t: maxprob >= t, 'resid': lambda t: resid < t}[kind]
        chosen = [select(nll, signal(t)) for t in t_all]
        out[f'selection {kind}'] = [(t, d.float().mean().item(), n.mean().item())
                                    for t, (n, d) in zip(t_all, chosen)]
        frozen = [ev.val_nll(model, rows, batch_size, exit=(kind, t)) for t in t_all]
        out[f'frozen {kind}'] = [(t, depth, n) for t, (n, depth) in zip(t_all, frozen)]
    return out

def best_fixed(table):
    """The lower envelope of every model's fixed-depth curve: depth -> NLL, interpolated."""
    points = {}
    for per_policy in table.values():
        for k, _, nll in per_policy.get('fixed', []):
            points[k] = min(points.get(k, nll), nll)
    ks = sorted(points)
    return lambda depth: float(np.interp(depth, ks, [points[k] for k in ks]))

def write(table):
    uniform = best_fixed(table)
    rows = ["| model | policy | threshold / k | mean depth | NLL | best fixed depth there | diff |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, per_policy in table.items():
        for policy, points in per_policy.items():
            for t, depth, nll in points:
                u = uniform(depth)
                rows.append(f"| {name} | {policy} | {t} | {depth:.2f} | {nll:.4f} | {u:.4f} | "
                            f"{nll - u:+.4f} |")
    with open(os.path.join(results, 'frontier.md'), 'w') as f:
        f.write('\n'.join(rows) + '\n')
    envelope = [(k, uniform(k)) for k in range(1, 13)]
    charts = []
    for policy in ['frozen maxprob', 'selection maxprob', 'frozen resid', 'selection resid', 'ACT']:
        series = [('best fixed depth', 'black', envelope)]
        for i, (name, per_policy) in enumerate(table.items()):
            if policy in per_policy:
                series.append((name, COLOURS[i], [(d, n) for _, d, n in per_policy[policy]]))
        if policy == 'ACT':  # one point a model: one line through the three penalties
            points = [point for _, _, model_points in series[1:] for point in model_points]
            series = series[:1] + [('ACT', 'purple', points)]
        charts.append(ev.svg_chart(f"{policy}: val NLL against mean depth", series))
    svg = ''.join(f'<g transform="translate(0,{ev.CHART_H * i})">{c}</g>'
                  for i, c in enumerate(charts))
    with open(os.path.join(results, 'frontier.svg'), 'w') as f:
        f.write(f'<svg xmlns="http://www.w3.org/2000/svg" width="{ev.CHART_W}" '
                f'height="{ev.CHART_H * len(charts)}">{svg}</svg>\n')
    with open(os.path.join(results, 'frontier.json'), 'w') as f:
        json.dump(table, f, indent=1)
    print('\n'.join(rows))
    print(f"wrote {results}/frontier.md, frontier.svg and frontier.json")

if __name__ == '__main__':
    exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'configurator.py')).read())
    check_output(os.path.join(results, 'frontier.json'), 'results')  # before hours of training
    os.makedirs(results, exist_ok=True)
    table = {}
    for name, (out_dir, args) in MODELS.items():
        train(out_dir, args)
        model, ckpt = load_checkpoint(os.path.join(out_dir, 'ckpt.pt'), device)
        model.eval()
        val = load_tokens(os.path.join('data', ckpt['config']['dataset']), 'val')
        rows = ev.val_rows(val, model.config.block_size, eval_iters * batch_size, seed=1337)
        table[name] = policies(model, rows)
        print(f"measured {name}", flush=True)
    write(table)
