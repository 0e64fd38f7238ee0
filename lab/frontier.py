"""
The seeded campaign behind RESULTS.md: trains every model the findings compare once per seed (its
initial weights and batches), measures each run on the same held-out text, and writes the
findings (mean +/- standard error over the seeds, each difference with its verdict) and the depth
frontier, compute in forward FLOPs per token:
$ python prepare.py --dataset=topics --tokenizer=byte --mirror=../shared/data
$ python prepare.py --dataset=sft --tokenizer=byte --block_size=128 --mirror=../shared/data
$ python lab/frontier.py                          # trains what is missing, measures: out-frontier/
$ python lab/frontier.py --results=lab/seeds  # the same, over the committed results
$ python lab/frontier.py --results=lab/tuned --from_runs=True  # its page from its runs/*.json
$ python lab/frontier.py --results=lab/gate --jobs=2 \
      --models=multi,single,exit-10,warmup,exit-10-warmup,exit-10-detach,exit-10-late,exit-10-early
A finished run is never trained again (one that stopped early is resumed, never measured
half-trained); a measured run keeps runs/<model>-s<seed>.json, so a rerun trains nothing. A
difference, paired by seed, is a finding when its mean exceeds t(0.975, n-1) standard errors over
its n seeds (verdict). A tuned arm is its model and settings, '+'-joined (TUNE): multi+w100+c0.25
is multi with --warmup_iters=100 --grad_clip=0.25.
"""
import os
import sys
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root, which
sys.path.insert(0, HERE)  # holds the modules imported below, train.py, config/: run from anywhere
import glob
import json
import math
import re
import html
import string
import itertools
import subprocess
from concurrent.futures import ThreadPoolExecutor
from functools import reduce
import numpy as np
import torch
import torch.nn.functional as F
import eval as ev
from model import GPT
from prepare import sft_targets, load_meta, load_tokens
from guards import InputError, check_output, load_checkpoint, saving, written, ran_on

SCHEDULE = ['--max_iters=750', '--lr_decay_iters=750', '--eval_interval=250']  # half the configs'
WIDE = ['--n_embd=192', '--n_head=6', '--dtype=bfloat16']  # where bf16 autocast pays on a CPU
# the arms confirmed at 1,500 steps and at a wider shape ('{}' in an argument: the run's steps)
CONFIRM = [('single', 'config/cpu_single.py', []), ('multi', 'config/cpu_multi.py', []),
           ('exit-10', 'config/cpu_exit.py', ['--exit_beta=10']),
           ('exit-10-early', 'config/cpu_exit.py', ['--exit_beta=10', '--gate_detached=(100,{})'])]

def pt(config, *args):  # a model trained from scratch: config/cpu_<config>.py, SCHEDULE, args
    return [f'config/cpu_{config}.py', *SCHEDULE, *args], None

MODELS = {  # name -> (train.py arguments, the model it fine-tunes or None); the same shape and data
    **{name: pt(name) for name in ('single', 'multi', 'phantom', 'sandwich3')},
    **{f'act-{hp}': pt('act', f'--halt_penalty={hp}') for hp in (0.001, 0.003, 0.01)},
    'plain': pt('plain'),
    'exit-0.1': pt('exit', '--exit_beta=0.1'),  # Ouro's stage I
    # a control: beta so large that p stays uniform (multi-depth supervision + the gate's gradient)
    'exit-10': pt('exit', '--exit_beta=10'),
    # a control: the gate's early gradient shrinks the LM's clipped step, like a longer warmup
    'warmup': pt('multi', '--warmup_iters=300'),
    'exit-10-warmup': pt('exit', '--exit_beta=10', '--warmup_iters=300'),  # gate + warmup?
    # does the gain travel through the gate's gradient into the states, and when? At steps [a, b)
    # the gate reads detached states (train.py gate_detached); its early burst is steps 10-60
    **{f'exit-10-{when}': pt('exit', '--exit_beta=10', f'--gate_detached={steps}')
       for when, steps in (('detach', '(0,750)'), ('late', '(0,100)'), ('early', '(100,750)'))},
    # the confirmation at the configs' own 1,500 steps (5 seeds), and at a wider shape in bf16
    **{f'{name}-1500': ([config, *[a.format(1500) for a in args]], None)
       for name, config, args in CONFIRM},
    **{f'{name}-wide': ([config, *SCHEDULE, *[a.format(750) for a in args], *WIDE], None)
       for name, config, args in CONFIRM},
    # (issue 50's variants of multi-depth supervision ran at 0530f8b: lab/depthsup)
    'sft': (['config/cpu_sft.py'], 'single'),  # SFT: 600 steps from the PT run of the same seed
    'sft-nopad': (['config/cpu_sft_nopad.py'], 'single'),
    'plain-sft': (['config/cpu_plain_sft.py'], 'plain'),
}
STUDY = ['single', 'multi', 'phantom', 'sandwich3', 'act-0.001', 'act-0.003', 'act-0.01', 'plain',
         'exit-0.1', 'exit-10', 'sft', 'sft-nopad', 'plain-sft']  # lab/seeds
TUNE = {'w': 'warmup_iters', 'c': 'grad_clip', 'lr': 'learning_rate', 'a': 'alpha_init',
        'b': 'beta2'}  # ('n', grad_noise: issue 48's plain noise, at 7317180)

def tuned(name):  # 'multi+w100+c0.25' -> (multi's args + --warmup_iters=100 --grad_clip=0.25, None)
    base, *knobs = name.split('+')
    settings = ', '.join(f'{k} ({v})' for k, v in TUNE.items())
    if base not in MODELS or MODELS[base][1] or not knobs:  # (not a fine-tuned one)
        raise InputError(f"--models={name}: a tuned arm is a model trained from scratch, then its "
                         f"settings, e.g. multi+w100+c0.25; settings: {settings}")
    args = list(MODELS[base][0])
    for knob in knobs:
        key = knob.rstrip('0123456789.e-')
        if key not in TUNE or key == knob:
            raise InputError(f"--models={name}: no setting '{knob}'; a setting is a letter and a "
                             f"value, e.g. w100: {settings}")
        args.append(f"--{TUNE[key]}={knob[len(key):]}")
    return args, None

seeds = (1, 2, 3)  # every model is trained once per seed (its initial weights and batches)
models = ''  # '' = the study's (STUDY); or some, comma-separated: 'single,multi'
jobs = 1  # runs trained and measured at a time, each on one thread (2 on a 2-core machine)
runs = 'out-frontier/runs'  # the checkpoints: runs/<model>-s<seed>/ckpt.pt
results = 'out-frontier'  # lab/seeds holds the committed ones: write there on purpose
from_runs = False  # True: rewrite the page from lab/runs/*.json as they are: train nothing
train_args = ''  # more train.py arguments for every model (a quick run: '--max_iters=100')
THRESHOLDS = {'maxprob': (0.3, 0.5, 0.7, 0.9), 'resid': (0.2, 0.1, 0.05, 0.02)}  # post-hoc exits
LAMBDAS = (0, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3)  # the oracle's price of compute, nats per MFLOP
SFT_MODELS = ['single', 'plain', 'sft', 'sft-nopad', 'plain-sft']  # scored on held-out SFT samples
TOPICS, SFT = 'data/topics_byte', 'data/sft_byte'
eval_iters = 10  # val batches of batch_size rows
batch_size = 16
device = 'cpu'

def run_dir(name, seed):
    return os.path.join(runs, f'{name}-s{seed}')

def log_path(name, seed):  # lab/train/<name>-s<seed>.log, its folder made
    os.makedirs(os.path.join(results, 'train'), exist_ok=True)
    return os.path.join(results, 'train', f'{name}-s{seed}.log')

def train(name, seed):
    """python train.py with the model's arguments, unless it finished (a stopped one is resumed)."""
    args, base = MODELS[name]
    if base:  # the run it starts from, first: finished, never half-trained
        train(base, seed)
    out_dir, what, why = run_dir(name, seed), 'training', ''
    start = [f'--init_from={run_dir(base, seed)}'] if base else []
    if os.path.exists(path := os.path.join(out_dir, 'ckpt.pt')):
        ckpt = torch.load(path, map_location='cpu', weights_only=True)
        done, goal = ckpt['iter_num'], ckpt['config']['max_iters']
        if done >= goal:
            return
        what, why = 'resuming', f" (it stopped at iter {done} of {goal})"
        start = ['--init_from=resume']  # (not fine-tuned anew)
    args = [*args, f'--seed={seed}', f'--out_dir={out_dir}', *train_args.split(), *start]
    log = log_path(name, seed)
    print(f"{what} {out_dir}{why}: python train.py {' '.join(args)} > {log}", flush=True)
    args = [os.path.join(HERE, a) if a.endswith('.py') else a for a in ['train.py', *args]]
    with open(log, 'a' if why else 'w') as f:
        r = subprocess.run([sys.executable, *args], stdout=f, stderr=subprocess.STDOUT)
    if r.returncode:
        raise InputError(f"training {out_dir} failed (exit {r.returncode}): see {log}")

# ----------------------------------------------------------------------------- compute
def block_flops(c, T):
    """A block's forward FLOPs per token, as torch's FlopCounterMode counts them (matmuls, and
    attention over all T keys of the row): qkv 6 d^2, proj 2 d^2, SwiGLU 24 d^2, each a
    multiply-add (x2); the scores and the weighted values, 4 T d."""
    d = c.n_embd
    return 2 * 16 * d * d + 4 * T * d

def flops(c, T, depth, readouts=1, gates=0):
    """Forward FLOPs per token: the prelude and `depth` loop iterations (summed over segments),
    `readouts` (the coda and the head: the model's own, plus one per maxprob check) and `gates`
    (ACT's, or in training the exit gate's, 2 d each: once per iteration, an upper bound)."""
    readout = c.n_coda * block_flops(c, T) + 2 * c.n_embd * c.vocab_size
    return (c.n_prelude + depth) * block_flops(c, T) + readouts * readout + gates * 2 * c.n_embd

def train_flops(c, T):
    """FLOPs per token of a training step: forward, and backward at twice the forward, with every
    supervised depth's readout; phantom's no-grad iterations run forward only."""
    depth = sum(c.loops)
    readouts = 1 + sum(d < depth for d in c.supervise)
    forward = flops(c, T, depth, readouts, depth if c.act or c.exit_gate else 0)
    no_grad = sum(max(k - c.phantom_steps, 0) for k in c.loops) if c.phantom else 0
    return 3 * forward - 2 * no_grad * block_flops(c, T)

# ----------------------------------------------------------------------------- measuring a run
@torch.no_grad()
def every_depth(model, rows):  # -> nll, maxprob, resid (K, N): each prediction at depth k = 1..K
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

def oracle(nll, cost):
    """The ceiling no per-token policy can pass: each token takes the fixed depth that minimises
    NLL_k + lambda * FLOPs_k (it sees the target), for each price lambda. cost: FLOPs_k (K,)."""
    mflop = torch.tensor(cost) / 1e6
    points = []
    for lam in LAMBDAS:
        pick = (nll + lam * mflop[:, None]).argmin(0)
        points.append(dict(t=lam, depth=(pick + 1).float().mean().item(),
                           nll=nll.gather(0, pick[None]).mean().item(),
                           flops=1e6 * mflop[pick].mean().item()))
    return points

def measure_val(model, rows):
    """-> {policy: [points]} on the val rows; a point: its threshold t (or k), depth, NLL, FLOPs."""
    c, T = model.config, rows.size(1)
    point = lambda t, depth, nll, readouts=1, gates=0: dict(
        t=t, depth=depth, nll=nll, flops=flops(c, T, depth, readouts, gates))
    if c.act or not c.loops:  # ACT: the gate's own depth; a plain transformer: its one depth
        nll, depth = ev.val_nll(model, rows, batch_size)
        return {'ACT' if c.act else 'fixed': [point(c.halt_penalty, depth, nll, 1, depth * c.act)]}
    nll, maxprob, resid = every_depth(model, rows)
    S, K = len(c.loops), len(nll)  # (k iterations in each of S segments)
    mean = lambda v: v.mean().item()
    out = {'fixed': [point(k, k * S, mean(n)) | dict(maxprob=mean(m), resid=mean(r))
                     for k, n, m, r in zip(range(1, K + 1), nll, maxprob, resid)],
           'oracle': oracle(nll, [flops(c, T, k * S) for k in range(1, K + 1)]),
           'past': [point(2 * K, 2 * K * S, ev.val_nll(model, rows, batch_size, 2 * K)[0])]}
    for kind in c.exit_kinds():  # (a maxprob check reads out)
        ts = THRESHOLDS[kind]
        frozen = [(t, *ev.val_nll(model, rows, batch_size, exit=(kind, t))) for t in ts]
        out[f'frozen {kind}'] = [point(t, d, n, 1 + d * (kind == 'maxprob')) for t, n, d in frozen]
        # every token runs all K; each reads out at its first confident depth
        signal = {'maxprob': lambda t: maxprob >= t, 'resid': lambda t: resid < t}[kind]
        picked = [(t, *select(nll, signal(t))) for t in ts]
        out[f'selection {kind}'] = [point(t, K * S, mean(n), K if kind == 'maxprob' else 1)
                                    | dict(depth=mean(d.float()) * S) for t, n, d in picked]
    return out

CLASSES = {'digits': string.digits, 'letters': string.ascii_letters, 'spaces': ' \n\t',
           'punctuation': string.punctuation}  # of a byte target; the rest: 'other'

def measure_docs(model, x, real, topics):
    """On the topics' held-out documents: suffix NLL, NLL, probes, depth per topic and per class."""
    nll, depth, resid, entropy = ev.score(model, x, batch_size)
    probes = {p: ev.probe(nll, signal, real) for p, signal in zip(PROBES, (resid, entropy))}
    kind = torch.full((257,), len(CLASSES))  # each byte's class; EOT and non-ASCII: 'other'
    for i, chars in enumerate(CLASSES.values()):
        kind[list(chars.encode())] = i
    masks = {name: real & (kind[x[:, 1:]] == i) for i, name in enumerate([*CLASSES, 'other'])}
    classes = {name: dict(nll=nll[m].mean().item(), mean_depth=depth[m].float().mean().item(),
                          tokens=int(m.sum())) for name, m in masks.items()}
    suffix = ev.suffix_nll(nll, real, ev.suffix(x.size(1))[1])  # the paper's scored targets
    return dict(suffix=suffix, nll=nll[real].mean().item(), probes=probes,
                topics=ev.topic_depths(nll, depth, real, topics), classes=classes)

def measure_sft(model, x, real, eot):
    """On the held-out SFT samples, the NLL and token count of: the answers and their EOT (what SFT
    trains), those and the padding after (a pad-trained SFT's), the paper's suffix (96..127)."""
    nll = ev.score(model, x, batch_size)[0]
    answer, padded = (sft_targets(x, eot, pad) >= 0 for pad in (False, True))
    columns = ev.suffix(x.size(1))[1]
    return dict(answer=nll[answer].mean().item(), answer_tokens=int(answer.sum()),
                with_pad=nll[padded].mean().item(), with_pad_tokens=int(padded.sum()),
                suffix=ev.suffix_nll(nll, real, columns), suffix_tokens=int(real[:, columns].sum()))

def measure(name, seed):
    """-> one run's measurements: runs/<name>-s<seed>.json, else trained if need be, measured."""
    path = os.path.join(results, 'runs', f'{name}-s{seed}.json')
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    train(name, seed)
    ckpt = os.path.join(run_dir(name, seed), 'ckpt.pt')
    model = load_checkpoint(ckpt, GPT.from_checkpoint, device)[0].eval()
    T = model.config.block_size
    rows = ev.val_rows(load_tokens(TOPICS, 'val'), T, eval_iters * batch_size, seed=1337)
    docs, _, x, real, _ = ev.doc_rows(TOPICS, T, max_docs=200)
    out = dict(model=name, seed=seed, ran_on=ran_on(),
               alphas=model.alphas(),
               train_flops=train_flops(model.config, T), val=measure_val(model, rows),
               docs=measure_docs(model, x, real, [d['topic'] for d in docs]))
    if name in SFT_MODELS:
        _, _, x, real, _ = ev.doc_rows(SFT, T, max_docs=10_000)  # all of them
        out['sft'] = measure_sft(model, x, real, load_meta(SFT)['eot'])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with saving(path, 'of the measurements') as tmp, open(tmp, 'w') as f:  # never half-written
        json.dump(out, f, indent=1)
    print(f"measured {name} seed {seed}: {path}", flush=True)
    return out

def campaign(names):
    """-> name -> seed -> measurements, `jobs` runs at a time, each on one thread: first the runs
    trained from scratch (two jobs never train one run: a fine-tuning trains its base), then all."""
    if jobs > 1:  # one thread each: two jobs on two threads each fight for the cores
        torch.set_num_threads(1)
        os.environ['OMP_NUM_THREADS'] = '1'  # (the train.py processes)
    every = [(n, s) for s in seeds for n in names]
    first = dict.fromkeys((MODELS[n][1] or n, s) for n, s in every  # each trained from scratch
                          if not os.path.exists(os.path.join(results, 'runs', f'{n}-s{s}.json')))
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(lambda run: train(*run), first))
        out = dict(zip(every, pool.map(lambda run: measure(*run), every)))
    return {n: {s: out[n, s] for s in seeds} for n in names}

def read_runs(folder):
    """-> {model: {seed: measurements}} of folder/runs/*.json: MODELS' order, then the rest sorted
    (the tuned arms; a screen may have other seeds than the models beside it)."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(folder, 'runs', '*.json'))):
        name, seed = os.path.basename(path)[:-len('.json')].rsplit('-s', 1)
        runs.setdefault(name, {})[int(seed)] = json.load(open(path))
    return {name: runs[name] for name in [*MODELS, *sorted(runs)] if name in runs}

# ----------------------------------------------------------------------------- the findings
DEPTH_MODELS = ['exit-10', 'warmup', 'exit-10-warmup', 'exit-10-detach', 'exit-10-late',
                'exit-10-early']  # multi-depth supervision and one change (section 10)
FIXED_MODELS = ['single', 'multi', 'phantom', 'exit-0.1', *DEPTH_MODELS]  # one shape
ACT_MODELS = ['act-0.001', 'act-0.003', 'act-0.01']
PT_MODELS = ['single', 'multi', 'phantom', 'sandwich3', 'plain', 'exit-0.1', *DEPTH_MODELS,
             *ACT_MODELS]
PROBES = ['relative residual', 'entropy']  # (the absolute residual and |z|: RESULTS, 6b)
KS = [1, 2, 4, 8, 12]  # the fixed depths a table shows

def stats(values):  # -> (mean, standard error of the mean) over the seeds
    v = np.array(values, dtype=float)
    return v.mean(), v.std(ddof=1) / math.sqrt(len(v)) if len(v) > 1 else float('nan')

def pm(values, digits=3):  # one seed has no standard error: its value alone
    mean, se = stats(values)
    return f"{mean:.{digits}f} ± {se:.{digits}f}" if len(values) > 1 else f"{mean:.{digits}f}"

def cell(runs, name, value, digits=3):  # value(run) over the model's seeds: mean ± SE
    return pm([value(r) for r in runs[name].values()], digits)

def any_run(runs, name):  # what its seeds share: the shape, the data's counts
    return next(iter(runs[name].values()))

def get(*keys):  # -> a run's value at keys: get('docs', 'nll')(run) is run['docs']['nll']
    return lambda run: reduce(lambda value, key: value[key], keys, run)

# t(0.975, n-1) over n seeds: Student's t, 5% two-sided, n-1 degrees of freedom (verdict)
T975 = {3: 4.303, 4: 3.182, 5: 2.776, 6: 2.571, 7: 2.447, 8: 2.365, 9: 2.306, 10: 2.262}

def verdict(diffs):  # the rule: a finding when |mean| > t(0.975, n-1) SE, over at least 3 seeds
    mean, se = stats(diffs)
    if len(diffs) < 3:
        return f"no verdict ({len(diffs)} seed{'s' * (len(diffs) > 1)})"
    ratio = f" ({mean / se:+.1f} SE)" if se > 0 else ''
    return ("**finding**" if abs(mean) > T975[min(len(diffs), 10)] * se
            else "not established") + ratio

def paired(runs, a, b, value):  # [a minus b, seed by seed, of value(run)] for the seeds both have
    a, b = runs.get(a, {}), runs.get(b, {})
    return [value(a[s]) - value(b[s]) for s in sorted(set(a) & set(b))]

def table(header, rows):
    lines = ['| ' + ' | '.join(header) + ' |', '|' + ' --- |' * len(header)]
    return '\n'.join(lines + ['| ' + ' | '.join(map(str, row)) + ' |' for row in rows]) + '\n'

def differences(named):  # [(what, [diff per seed])] -> a table with the verdicts
    return table(['difference', 'mean ± SE', 'verdict'],
                 [[what, pm(d), verdict(d)] for what, d in named if d])

def envelope(run):
    """The run's own fixed-depth curve made monotone in compute: FLOPs -> the best NLL at that
    compute or less (a running minimum), interpolated between whole depths."""
    fixed = run['val']['fixed']
    x = [p['flops'] for p in fixed]
    y = np.minimum.accumulate([p['nll'] for p in fixed])
    return lambda flops: float(np.interp(flops, x, y))

def at(k, key='nll'):  # the val NLL (or another key) of a run at fixed depth k (no loop: its one)
    fixed = lambda run: run['val']['fixed']
    return lambda run: fixed(run)[0][key] if len(fixed(run)) == 1 else next(
        p[key] for p in fixed(run) if p['t'] == k)

def trained(run):  # ... at the depth it trained at (ACT: the gate's)
    return (run['val'].get('ACT') or run['val']['fixed'])[-1]['nll']

def k1_penalty(run):  # how much worse one iteration is than the best depth
    return at(1)(run) - min(p['nll'] for p in run['val']['fixed'])

def policy_rows(runs, name, policy, base=None):
    """One row per threshold: compute, depth and NLL over the seeds, and the NLL minus the base
    model's envelope at that compute within a seed (same weights, rows): < 0 beats uniform depth."""
    per_seed = {s: r['val'][policy] for s, r in runs[name].items()
                if policy in r['val'] and s in runs[base or name]}
    rows = []
    for same_t in zip(*per_seed.values()):  # one threshold's point of each seed
        points = dict(zip(per_seed, same_t))
        diffs = [p['nll'] - envelope(runs[base or name][s])(p['flops']) for s, p in points.items()]
        column = lambda key, scale=1: [p[key] / scale for p in points.values()]
        rows.append([name, policy, same_t[0]['t'], pm(column('flops', 1e6), 2),
                     pm(column('depth'), 2), pm(column('nll')), pm(diffs), verdict(diffs)])
    return rows

def tradeoff(runs, names):
    named = [('single minus multi: the k=1 penalty', paired(runs, 'single', 'multi', k1_penalty))]
    named += [(f"{a} minus {b}: NLL at k={k}", paired(runs, a, b, at(k))) for a, b, k in [
        ('single', 'multi', 1), ('single', 'multi', 12), ('exit-0.1', 'multi', 12),
        ('exit-0.1', 'single', 12), ('exit-10', 'multi', 12), ('exit-0.1', 'exit-10', 12)]]
    rows = [[n, k, cell(runs, n, at(k)), cell(runs, n, at(k, 'maxprob')),
             cell(runs, n, at(k, 'resid'), 4)] for n in names[:2] for k in range(1, 13)]
    return '\n'.join([
        "## 1-2. The trade-off law: val NLL at fixed depth k\n",
        table(['model', *[f'k={k}' for k in KS], 'k=1 minus best'],
              [[n, *[cell(runs, n, at(k)) for k in KS], cell(runs, n, k1_penalty)] for n in names]),
        differences(named),
        "\nConfidence and the fixed point against k: the mean top probability and the mean "
        "relative residual |z_k - z_(k-1)| / |z_(k-1)| of the last step, at each fixed depth:\n",
        table(['model', 'k', 'NLL', 'mean maxprob', 'mean residual'], rows)])

def depth_signals(runs, suffix=''):
    """What makes exit-10 train better: each arm is multi-depth supervision plus one change, paired
    by seed with multi, single, exit-10 and exit-10-early of its schedule ('', '-1500', '-wide')."""
    names = [n + suffix for n in ['single', 'multi', *DEPTH_MODELS]]
    names = [n for n in names if runs.get(n)] if suffix else shown(runs, names, '## 10.')
    bases = [base + suffix for base in ('multi', 'single', 'exit-10', 'exit-10-early')]
    values = [('NLL at k=1', at(1)), ('NLL at k=12', at(12)), ('the k=1 penalty', k1_penalty)]
    named = [(f"{n} minus {base}: {what}", paired(runs, n, base, value))
             for n in names if n not in bases[:2] for base in bases if base != n
             for what, value in values]
    which = f" (the {suffix[1:]} schedule)" if suffix else ''
    return '\n'.join([f"## 10. What makes the exit gate's model train better{which}\n",
                      table(['model', *[f'k={k}' for k in KS]],
                            [[n, *[cell(runs, n, at(k)) for k in KS]] for n in names]),
                      differences(named)])

def exits(runs, names):
    header = ['model', 'policy', 't', 'MFLOP/token', 'mean depth', 'NLL', 'minus own envelope',
              'verdict']
    policies = ['frozen maxprob', 'selection maxprob', 'frozen resid', 'selection resid',
                'frozen learned', 'oracle']
    act = [row for n in ACT_MODELS if runs.get(n)
           for row in policy_rows(runs, n, 'ACT', base='single')]
    out = ["## 3, 9. Per-token depth against the model's own uniform depth, in FLOPs per token\n",
           table(header, [row for n in names for policy in policies
                          for row in policy_rows(runs, n, policy)])]
    if act:
        out += ["\nACT, against the envelope of the single-depth model of the same seed (its "
                "shape):\n", table(header, act)]
    out.append("\nThe best envelope across the fixed-depth models (per seed, the lowest there):\n")
    best = [[k, f"{x / 1e6:.2f}", pm(per_seed)] for k, x, per_seed in best_envelope(runs, names)]
    return '\n'.join(out + [table(['depth', 'MFLOP/token', 'best NLL'], best)])

def best_envelope(runs, names):
    """-> [(k, its FLOPs, [per seed: the lowest envelope of the models there])] at each depth k
    of the first model (the models share its shape: single-depth's, where it is there)."""
    return [(p['t'], p['flops'], [min(envelope(runs[n][s])(p['flops']) for n in names
                                      if s in runs[n]) for s in sorted(runs[names[0]])])
            for p in any_run(runs, names[0])['val']['fixed']]

def training(runs, names):
    alphas = lambda n: ' / '.join(pm(a) for a in zip(*[r['alphas'] for r in runs[n].values()]))
    rows = [[n, cell(runs, n, trained), f"{any_run(runs, n)['train_flops'] / 1e6:.2f}", alphas(n)]
            for n in names]
    return '\n'.join([
        "## 4. Phantom gradient, 6. multi-sandwich: val NLL at the trained depth\n",
        table(['model', 'val NLL', 'training MFLOP/token', 'alphas'], rows),
        differences([(f"{a} minus {b}", paired(runs, a, b, trained)) for a, b in
                     [('phantom', 'single'), ('sandwich3', 'single'), ('single', 'plain')]])])

def documents(runs, names):
    probe = lambda p: lambda r: r['docs']['probes'][p] or 0  # (None: no loop, a constant signal)
    rows = [[n, *[cell(runs, n, get('docs', 'suffix', key)) for key in ('masked', 'unmasked')],
             f"{any_run(runs, n)['docs']['suffix']['pad_fraction']:.1%}",
             *[cell(runs, n, probe(p), 2) for p in PROBES]] for n in names]
    return '\n'.join([
        "## 5. Padding, and 6b. the probes (Pearson r with the NLL), on the held-out documents\n",
        table(['model', 'suffix masked', 'suffix unmasked', 'pad', *PROBES], rows)])

def act_depths(runs, names):
    out = ["## 7. ACT: loop depth per topic and per character class\n"]
    for n in names:
        per_seed = list(runs[n].values())
        groups = [(g, t) for g in ('topics', 'classes') for t in per_seed[0]['docs'][g]]
        out += [f"`{n}` (halt_penalty {n.split('-')[1]}):\n", table(['', *[t for _, t in groups]], [
            ['mean depth', *[cell(runs, n, get('docs', g, t, 'mean_depth'), 2) for g, t in groups]],
            ['NLL', *[cell(runs, n, get('docs', g, t, 'nll')) for g, t in groups]],
            ['tokens', *[per_seed[0]['docs'][g][t]['tokens'] for g, t in groups]]])]
        depth = lambda r, t, g='topics': r['docs'][g][t]['mean_depth']
        topics = list(per_seed[0]['docs']['topics'])
        mean = {t: np.mean([depth(r, t) for r in per_seed]) for t in topics}
        hi, lo = max(mean, key=mean.get), min(mean, key=mean.get)  # (picked after the fact)
        orders = [' > '.join(sorted(topics, key=lambda t: -depth(r, t))) for r in per_seed]
        classes = [depth(r, 'digits', 'classes') - depth(r, 'letters', 'classes') for r in per_seed]
        out += [differences([(f"{hi} minus {lo} (the deepest and shallowest topic on average)",
                              [depth(r, hi) - depth(r, lo) for r in per_seed]),
                             ('digits minus letters', classes)]),
                f"Topics by depth, seed by seed: {'; '.join(orders)}\n"]
    return '\n'.join(out)

def sft(runs, names):
    answers, padded, topics = get('sft', 'answer'), get('sft', 'with_pad'), get('docs', 'nll')
    suffix = get('sft', 'suffix', 'masked')
    metrics = [('answers (masked)', answers), ('answers + pad', padded), ('suffix masked', suffix),
               ('suffix unmasked', get('sft', 'suffix', 'unmasked')),
               ('topics docs, real tokens', topics)]
    ranks = [[s, what, ' < '.join(sorted(names, key=lambda n: f(runs[n][s])))]
             for s in sorted(set.intersection(*[set(runs[n]) for n in names]))
             for what, f in metrics[:2]]
    named = [('SFT cost on topics: sft minus single', 'sft', 'single', topics),
             ('SFT cost on topics: plain-sft minus plain', 'plain-sft', 'plain', topics),
             ('SFT on the suffix, real tokens: sft minus single', 'sft', 'single', suffix),
             ('SFT on the suffix, real tokens: plain-sft minus plain', 'plain-sft', 'plain',
              suffix),
             ('tied minus plain, PT, topics', 'single', 'plain', topics),
             ('tied minus plain, SFT answers', 'sft', 'plain-sft', answers),
             ('tied minus plain, SFT answers + pad', 'sft', 'plain-sft', padded),
             ('pad-trained minus pad-ignored, answers', 'sft', 'sft-nopad', answers),
             ('pad-trained minus pad-ignored, answers + pad', 'sft', 'sft-nopad', padded)]
    first = any_run(runs, names[0])['sft']
    return '\n'.join([
        "## 8. SFT on held-out samples, and the ranking flip\n",
        f"The held-out SFT samples: {first['answer_tokens']:,} answer tokens (answers and their "
        f"EOT), {first['with_pad_tokens']:,} with the padding after them; the paper's suffix "
        f"(targets 96..127) holds {first['suffix_tokens']:,} real tokens "
        f"({first['suffix']['pad_fraction']:.1%} of it is pad).\n",
        table(['model', *[what for what, _ in metrics]],
              [[n, *[cell(runs, n, f) for _, f in metrics]] for n in names]),
        table(['seed', 'ranked by', 'models, best first'], ranks),
        differences([(what, paired(runs, a, b, f)) for what, a, b, f in named])])

def findings(runs):  # -> the findings page (markdown): every table, from the measured runs
    have = lambda names: [n for n in names if runs.get(n)]
    seeds = sorted({s for per in runs.values() for s in per})
    parts = [f"# The seeded findings\n\n{hand_note()}Written by `python lab/frontier.py "
             f"--results={results}` from `{results}/runs/*.json`, seeds "
             f"{', '.join(map(str, seeds))}. A cell is the mean ± the standard error over the "
             "seeds; a difference is a **finding** when its mean exceeds t(0.975, n-1) "
             "standard errors over its n seeds (4.30 at 3, 2.78 at 5; paired by seed), else "
             "*not established*, and 2 seeds give no verdict; (+x SE) is the mean over its "
             "standard error. " + where_ran(runs) + "\n"]
    fixed, pretrained = shown(runs, FIXED_MODELS, '## 1-2.'), shown(runs, PT_MODELS, '## 4.')
    if runs.get('single'):
        parts += [tradeoff(runs, fixed), exits(runs, fixed)]
    if pretrained:
        parts += [training(runs, pretrained), documents(runs, pretrained),
                  act_depths(runs, have(ACT_MODELS))]
    if have(SFT_MODELS) == SFT_MODELS:
        parts.append(sft(runs, SFT_MODELS))
    if have(DEPTH_MODELS[1:]) and runs.get('multi'):  # (lab/seeds has exit-10 only)
        parts.append(depth_signals(runs))
    if any('+' in n for n in runs):
        parts.append(tuning(runs))
    for suffix in ('-1500', '-wide'):  # the confirmations: the same tables, another schedule
        if runs.get('multi' + suffix) and runs.get('exit-10' + suffix):
            parts += [depth_signals(runs, suffix), exits(runs, have(schedule(suffix)))]
    return '\n'.join(parts)

def page():  # the findings page that this run rewrites ('' if there is none yet)
    path = os.path.join(results, 'findings.md')
    return open(path).read() if os.path.exists(path) else ''

def hand_note():
    """The page's note written by hand (a '> ' block under its title), kept by every rewrite."""
    note = list(itertools.takewhile(lambda line: line.startswith('>'), page().split('\n')[2:]))
    return '\n'.join(note) + '\n\n' if note else ''

def shown(runs, names, heading):
    """-> the models of a table: those of `names` that ran, in that order, and the models that ran
    whose training code left (neither in MODELS nor a tuned arm): where the page being rewritten
    shows them, under the first heading that starts with `heading`, there (each after the model
    above it); on a page without that table, after the others, by name."""
    out = [n for n in names if runs.get(n)]
    gone = sorted(n for n in runs if runs[n] and n not in MODELS and '+' not in n)
    table = re.search(rf'^{re.escape(heading)} .*?(?=^## |\Z)', page(), re.M | re.S)
    if not table:
        return out + gone
    place = 0  # where the next one goes: after the last row seen that is in `out`
    for n in dict.fromkeys(re.findall(r'^\| ([^|]+?) \|', table[0], re.M)):
        if n in gone:
            out.insert(place, n)
        if n in out:
            place = out.index(n) + 1
    return out

def where_ran(runs):  # -> a sentence: the commits and machines the runs record (ran_on)
    where = [r.get('ran_on') for per in runs.values() for r in per.values()]
    places = sorted({f"{w['commit']} (torch {w['torch']}, {w['cpu']})" for w in where if w})
    unknown = sum(w is None for w in where)
    said = (f"{unknown} of {len(where)} runs were made before runs recorded where they ran, so "
            "a cell may mix commits and machines. " if unknown else '')
    if places:
        said += f"Runs made at: {'; '.join(places)}."
    return said.strip()

def tuning(runs):
    """Each tuned arm beside its model at the configs' settings; each arm minus its model; each
    gated model minus each ungated one of its schedule at any settings (the method tuned as hard
    as the base); and the trade-off law at each setting that single and multi both ran."""
    base = lambda n: n.partition('+')[0]
    steps = lambda n: next((s for s in ('-1500', '-wide') if base(n).endswith(s)), '')
    order = {name: i for i, name in enumerate(MODELS)}  # (a model whose code left: last)
    arms = sorted([n for n in runs if '+' in n and runs[n]],
                  key=lambda n: (order.get(base(n), len(order)), n))
    bases = [n for n in dict.fromkeys(map(base, arms)) if runs.get(n)]
    ks = [1, 12]
    rows = [[n, len(runs[n]), *[cell(runs, n, at(k)) for k in ks]] for n in bases + arms]
    named = [(f"{a} minus {base(a)}: NLL at k={k}", paired(runs, a, base(a), at(k)))
             for a in arms for k in ks]
    gated = [n for n in bases + arms if n.startswith('exit')]  # each gated minus each ungated
    named += [(f"{a} minus {b}: NLL at k=12", paired(runs, a, b, at(12)))
              for a in gated for b in bases + arms
              if not b.startswith('exit') and '+' in a + b and steps(a) == steps(b)]
    laws = [(a, 'multi' + a[len('single'):]) for a in arms if a.startswith('single+')]
    named += [(f"{a} minus {m}: the k=1 penalty", paired(runs, a, m, k1_penalty))
              for a, m in laws if runs.get(m)]
    return '\n'.join(["## 11. Tuned settings: each arm beside its model (TUNE in frontier.py)\n",
                      table(['model', 'seeds', *[f'k={k}' for k in ks]], rows), differences(named)])

def schedule(suffix):  # the fixed-depth models of one schedule: '' (750 steps), '-1500', '-wide'
    return [n + suffix for n in FIXED_MODELS if n + suffix in MODELS]

# ----------------------------------------------------------------------------- the chart
def ticks(lo, hi):  # about 5 round values (1, 2 or 5 times a power of ten apart) from lo to hi
    raw = (hi - lo) / 5
    step = min((m * 10 ** math.floor(math.log10(raw)) for m in (1, 2, 5, 10)),
               key=lambda st: abs(st - raw))
    return np.arange(math.ceil(lo / step) * step, hi + step / 1e6, step)

CHART_W, CHART_H = 520, 240  # one chart, in pixels; the legend takes the right 150

def svg_chart(title, series):  # [(name, colour, [(MFLOP, NLL)])] -> an SVG line chart, a legend
    points = [p for _, _, ps in series for p in ps]
    (x0, y0), (x1, y1) = np.min(points, 0), np.max(points, 0)
    x1, y1 = max(x1, x0 + 1e-3), max(y1, y0 + 1e-3)  # a flat line still gets an axis
    left, right, top, bottom = 56, CHART_W - 150, 24, CHART_H - 40  # the plot area
    px = lambda x: left + (right - left) * (x - x0) / (x1 - x0)
    py = lambda y: bottom - (bottom - top) * (y - y0) / (y1 - y0)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{CHART_W}" height="{CHART_H}" '
           f'font-family="sans-serif" font-size="11"><text x="{left}" y="14">{title}</text>']
    for x in ticks(x0, x1):  # vertical gridlines, labelled under the x axis
        svg.append(f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{top}" y2="{bottom}" '
                   f'stroke="#ddd"/><text x="{px(x):.1f}" y="{bottom + 14}" '
                   f'text-anchor="middle">{x:g}</text>')
    for y in ticks(y0, y1):  # horizontal gridlines, labelled left of the y axis
        svg.append(f'<line x1="{left}" x2="{right}" y1="{py(y):.1f}" y2="{py(y):.1f}" '
                   f'stroke="#ddd"/><text x="{left - 4}" y="{py(y) + 4:.1f}" '
                   f'text-anchor="end">{y:.3g}</text>')
    svg.append(f'<polyline fill="none" stroke="black" points="{left},{top} {left},{bottom} '
               f'{right},{bottom}"/><text x="{(left + right) / 2}" y="{CHART_H - 6}" '
               f'text-anchor="middle">forward MFLOP per token</text><text transform="translate('
               f'12,{(top + bottom) / 2}) rotate(-90)" text-anchor="middle">val NLL</text>')
    for i, (name, colour, ps) in enumerate(series):
        ps = sorted(dict(ps).items())  # one point per x
        line = ' '.join(f"{px(x):.1f},{py(y):.1f}" for x, y in ps)
        svg.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{line}"/>')
        svg += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{colour}"/>'
                for x, y in ps]
        ly = top + 6 + 16 * i  # the legend: a swatch and the name
        svg.append(f'<line x1="{right + 12}" x2="{right + 30}" y1="{ly}" y2="{ly}" '
                   f'stroke="{colour}" stroke-width="3"/><text x="{right + 34}" '
                   f'y="{ly + 4}">{html.escape(name)}</text>')
    return ''.join(svg) + '</svg>'

def mean_points(runs, name, policy):  # [(MFLOP, NLL)] of a policy, each the mean over the seeds
    per_seed = [r['val'][policy] for r in runs[name].values() if policy in r['val']]
    return [(np.mean([p['flops'] for p in points]) / 1e6, np.mean([p['nll'] for p in points]))
            for points in zip(*per_seed)]

def chart(runs):
    """One chart per fixed-depth model of each schedule: its fixed depths, exits and oracle beside
    the best envelope of that schedule's models; then ACT's points beside single's fixed depths."""
    series_of = {'fixed': 'black', 'frozen maxprob': 'crimson', 'frozen resid': 'darkorange',
                 'frozen learned': 'seagreen', 'oracle': 'steelblue'}
    charts = []
    schedules = [[n for n in schedule(sfx) if runs.get(n)] for sfx in ('', '-1500', '-wide')]
    for names in filter(None, schedules):  # (each with a model measured)
        best = [(x / 1e6, np.mean(per_seed)) for _, x, per_seed in best_envelope(runs, names)]
        for n in names:
            series = [(policy, colour, mean_points(runs, n, policy))
                      for policy, colour in series_of.items() if policy in any_run(runs, n)['val']]
            charts.append(svg_chart(f"{n}: val NLL against compute (mean of the seeds)",
                                    series + [('best of any model', 'gray', best)]))
    act = [p for n in ACT_MODELS if runs.get(n) for p in mean_points(runs, n, 'ACT')]
    if act and runs.get('single'):
        charts.append(svg_chart("ACT at three penalties, beside single's fixed depths",
                                [('single: fixed', 'black', mean_points(runs, 'single', 'fixed')),
                                 ('ACT', 'purple', act)]))
    body = ''.join(f'<g transform="translate(0,{CHART_H * i})">{c}</g>'
                   for i, c in enumerate(charts))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{CHART_W}" '
            f'height="{CHART_H * len(charts)}">{body}</svg>\n')

if __name__ == '__main__':
    exec(open(os.path.join(HERE, 'configurator.py')).read())
    names = models.split(',') if models else STUDY
    MODELS.update({name: tuned(name) for name in names if '+' in name})
    if unknown := [name for name in names if name not in MODELS]:
        raise InputError(f"--models={models}: no model {', '.join(unknown)}; choose from "
                         f"{', '.join(MODELS)}, e.g. --models=single,multi")
    check_output(os.path.join(results, 'findings.md'), 'results')  # before hours of training
    os.makedirs(results, exist_ok=True)
    if not from_runs:  # before hours of training: is the data there? (else: how to make it)
        for data_dir in (TOPICS, SFT):
            load_meta(data_dir)
    measured = read_runs(results) if from_runs else campaign(names)
    for name, text in (('findings.md', findings(measured)), ('frontier.svg', chart(measured))):
        with written(os.path.join(results, name)) as f:  # whole, or the old page kept
            f.write(text)
    print(f"wrote {results}/findings.md and frontier.svg")
