"""
Per-token depth: how much room can a policy LEARN? An oracle that sees the target finds 0.05-0.10
nats below a model's own uniform depth at equal FLOPs, but on a flat depth curve much of it may be
selection on noise (each token's minimum of twelve nearly equal noisy NLLs). Per run, on
frontier.measure's held-out rows, in the selection protocol (every token run to each depth
k = 1..K, a policy's choice reads its depth's logits), each policy's curve over its price or
threshold (made a lower convex hull: two settings can be mixed at random) against the uniform hull
(the same, of depths 1..K) at the FLOPs of uniform depth m, the policy's own FLOPs included:
  oracle            each token the depth minimising NLL_k + lambda MFLOP_k (frontier.oracle)
  seed-pair oracle  the depths that the same arm's next seed would pick so, scored with this model
  class lookup      input byte class x position bucket -> its best depth: chosen on half the
                    rows, scored on the other half (both ways)
  causal: free      least squares, on TRAINING rows, of the gain from depth j to each later depth
                    on what is known at j: |z|, residual, position, byte class (~0 FLOPs); a token
                    stops where no later depth's predicted gain pays its price
  causal: state     the same, also on the state z_j itself (d numbers more)
  causal: readout   the same, also on maxprob and entropy (a readout at each depth)
  router            Think-at-Hard's: an MLP d -> 16 -> 1 on the state z_j, trained on training rows
                    to say "the next iteration lowers this token's NLL"; continue above a threshold
  resid exit        the exit the model has (--exit_at=resid:t): stop once the residual is below t
The causal policy best on the training rows is run again FROZEN (Loop.per_token: a stopped token's
state is frozen while later tokens attend to it), where its FLOPs are really saved, beside the
resid exit run frozen as the model runs it: does a learned rule beat the exit there is?
$ python lab/frontier.py --results=lab/room --runs=out-room/runs --jobs=2 '--seeds=(1,2,3,4,5)' \
      --models=multi+w100+lr4.5e-3,single+w100+lr4.5e-3,exit-10-early+w100+lr4.5e-3
$ python lab/room/room.py --runs=out-room/runs    # -> lab/room/policies/*.json, lab/room/room.md
"""
import os
import sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # lab/
import json
import time
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import frontier as fr
import eval as ev
from model import GPT, residual
from prepare import load_tokens
from guards import load_checkpoint, saving, ran_on
from page import drawn

runs = 'out-room/runs'  # the checkpoints: runs/<arm>-s<seed>/ckpt.pt
models = 'multi+w100+lr4.5e-3,single+w100+lr4.5e-3,exit-10-early+w100+lr4.5e-3'
seeds = (1, 2, 3, 4, 5)
results = os.path.join(fr.HERE, 'lab', 'room')  # policies/<arm>-s<seed>.json and room.md
data = fr.TOPICS
n_rows = 160  # held-out rows (frontier.measure's: seed 1337)
train_rows = 640  # training rows, for the causal policies to learn from
train_seed = 7  # where they lie in train.bin
batch_size = 16
MEAN_DEPTHS = (1.5, 2, 3, 6, 9)
PRICES = (0, *np.geomspace(1e-3, 30, 22).round(4))  # nats per MFLOP: oracles, causal policies
THRESHOLDS = (0, .02, .05, .1, .2, .3, .4, .5, .6, .7, .8, .9, .95, .98, 1)  # the router's
RESID = (0.2, 0.1, 0.07, 0.05, 0.03, 0.02, 0.01, 0.005)  # the resid exit's thresholds
HIDDEN = 16  # the router's width
BUCKETS = (0, 1, 4, 16, 64)  # the class lookup's position buckets, by their first position

# ----------------------------------------------------------------------------- per token
def byte_class(x):  # -> each byte's class: frontier.CLASSES' (digits, letters, spaces,
    kind = torch.full((257,), len(fr.CLASSES))  # punctuation), then 'other' (EOT, non-ASCII)
    for i, chars in enumerate(fr.CLASSES.values()):
        kind[list(chars.encode())] = i
    return kind[x]

def embed(model, x):  # GPT.forward's first lines: token + position, LN, the prelude
    z = model.ln_emb(model.wte(x) + model.wpe(torch.arange(x.size(1))))
    for block in model.prelude:
        z = block(z)
    return z

def read(model, z):  # -> the readout's logits at z, and its maxprob and entropy
    logits = model.readout(z).float()
    logp = logits.log_softmax(-1)
    return logits, logp.exp().amax(-1), -(logp.exp() * logp).sum(-1)

def nll_of(logits, x):  # -> each prediction's NLL (B, T - 1), as frontier.every_depth's
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), x[:, 1:], reduction='none')

@torch.no_grad()
def trace(model, rows):
    """Every token run to each depth k = 1..K as n_loops=k runs it (Loop.fixed's steps), read out
    after each -> {nll, maxprob, entropy, resid, znorm: (K, N), z: (K, N, d), pos, cls: (N,)} of
    the N = rows x (T - 1) predictions, in frontier.every_depth's order."""
    out = []
    for x in rows.split(batch_size):
        z, per = embed(model, x), []
        for i in range(model.config.loops[0]):
            z_prev, z = z, model.segments[0].step(z, i)
            logits, maxprob, entropy = read(model, z)
            per.append(dict(nll=nll_of(logits, x), maxprob=maxprob[:, :-1], z=z[:, :-1],
                            entropy=entropy[:, :-1], resid=residual(z, z_prev)[:, :-1],
                            znorm=z[:, :-1].norm(dim=-1)))
        out.append({key: torch.stack([p[key] for p in per]).flatten(1, 2) for key in per[0]})
    tr = {key: torch.cat([o[key] for o in out], 1) for key in out[0]}
    return tr | dict(pos=torch.arange(rows.size(1) - 1).repeat(len(rows)),
                     cls=byte_class(rows[:, :-1]).flatten())

def view(tr, j):  # -> what a policy may read at depth j (an index): each (N,), z (N, d)
    return {key: v if key in ('pos', 'cls') else v[j] for key, v in tr.items()}

def features(v, kind='free'):
    """A view -> (N, F). free: a constant, log residual, log |z|, position (two ways), the byte
    class (one-hot, 'other' the base): 9; readout: and maxprob, entropy; state: and z itself."""
    pos = v['pos'].float()
    cols = [torch.ones_like(pos), v['resid'].clamp_min(1e-6).log(), v['znorm'].log(), pos / 128,
            pos.log1p(), *[(v['cls'] == c).float() for c in range(len(fr.CLASSES))]]
    x = torch.stack(cols + ([v['maxprob'], v['entropy']] if kind == 'readout' else []), -1)
    return torch.cat([x, v['z']], -1) if kind == 'state' else x

# ----------------------------------------------------------------------------- compute, curves
def cost(c, T, depth, kind=''):
    """Forward FLOPs per token at depth (a tensor), as frontier.flops counts them, and the
    policy's own: 'causal: readout' reads out at each depth it reaches (where it stops, that
    readout is the output); at each depth it decides at (all but the last) the router runs its
    MLP, 'causal: state' its 9 + d features times (at most) K - 1 weights; the rest ~0."""
    readouts = depth if kind == 'causal: readout' else 1
    own = {'router': 2 * (c.n_embd + 1) * HIDDEN,
           'causal: state': 2 * (c.n_embd + 9) * (c.loops[0] - 1)}.get(kind, 0)
    return fr.flops(c, T, depth, readouts) + own * depth.clamp(max=c.loops[0] - 1)

def picked(nll, depth):  # -> each token's NLL (N,) at its depth (N,) 1..K, from nll (K, N)
    return nll.gather(0, depth[None] - 1)[0]

def scored(t, nll, depth, c, T, kind=''):  # -> a policy's point from each token's NLL and depth
    return dict(t=float(t), depth=depth.float().mean().item(), nll=nll.mean().item(),
                flops=cost(c, T, depth.double(), kind).mean().item())

def curve(points):
    """-> the points' lower convex hull in (FLOPs, NLL), from the cheapest to the lowest NLL: what
    a random mix of two of them gets at any compute between (the best at that compute or less)."""
    out = []
    for p in sorted((p['flops'], p['nll']) for p in points):
        while len(out) > 1 and ((out[-1][0] - out[-2][0]) * (p[1] - out[-2][1])
                                <= (out[-1][1] - out[-2][1]) * (p[0] - out[-2][0])):
            out.pop()  # (out[-1] lies on or above the chord from out[-2] to p)
        out.append(p)
    return out[:1 + int(np.argmin([y for _, y in out]))]

def on(points, flops):  # -> the curve's NLL at that compute: flat past its end, nan before it
    x, y = zip(*curve(points))
    return float(np.interp(flops, x, y)) if flops >= x[0] * (1 - 1e-9) else float('nan')

def at_depths(uniform):  # -> the FLOPs of uniform depth m, each of MEAN_DEPTHS (linear in depth)
    return np.interp(MEAN_DEPTHS, [p['depth'] for p in uniform], [p['flops'] for p in uniform])

def minus_hull(points, uniform):  # -> per mean depth: the policy's NLL minus the uniform hull's
    return [on(points, x) - on(uniform, x) for x in at_depths(uniform)]

# ----------------------------------------------------------------------------- the policies
def priced(nll, per_depth, lam):  # -> each token's depth 1..K minimising NLL_k + lam MFLOP_k
    return (nll + lam * per_depth[:, None] / 1e6).argmin(0) + 1

def lookup(tr, per_depth, lam):
    """Each cell (byte class x position bucket) gets the depth minimising its mean NLL_k + lam
    MFLOP_k on one half of the rows, for the tokens of the other half (and the other way round)."""
    nll, n = tr['nll'], len(BUCKETS)
    cells = tr['cls'] * n + (tr['pos'][:, None] >= torch.tensor(BUCKETS)).sum(1) - 1
    depth, first = torch.empty_like(cells), torch.arange(nll.size(1)) < nll.size(1) // 2
    for fit in (first, ~first):
        count = torch.bincount(cells[fit], minlength=n * (len(fr.CLASSES) + 1))
        mean = torch.zeros(len(nll), len(count)).index_add_(1, cells[fit], nll[:, fit]) / count
        depth[~fit] = priced(mean.nan_to_num(0), per_depth, lam)[cells[~fit]]  # (empty: k=1)
    return depth

def fit_gains(tr, kind):
    """Per depth j < K: least squares, on the features at j, of each token's gain from j to each
    later depth k, NLL_j - NLL_k -> [weights (F, K - j - 1)]."""
    nll = tr['nll'].double()
    return [torch.linalg.lstsq(features(view(tr, j), kind).double(),
                               nll[j][:, None] - nll[j + 1:].T).solution.float()
            for j in range(len(nll) - 1)]

def stops(weights, x, lam, step):
    """-> where no later depth's predicted gain pays its price (lam nats per MFLOP, step MFLOP a
    depth more): x, the features at j; weights, fit_gains' at j."""
    return ((x @ weights) - lam * step * torch.arange(1, weights.size(1) + 1)).amax(-1) < 0

class Router(nn.Module):
    """Think-at-Hard's router: z_j -> the chance that one more iteration pays (d -> 16 -> 1)."""
    def __init__(self, z):
        super().__init__()
        self.mu, self.sd = z.mean(0), z.std(0)  # inputs standardised by the training states
        self.net = nn.Sequential(nn.Linear(z.size(-1), HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1))

    def forward(self, z):
        return torch.sigmoid(self.net((z - self.mu) / self.sd))[..., 0]

def fit_router(tr, steps=400):
    """Binary cross-entropy on the training rows' states at depths j < K, labelled "the next
    iteration lowers this token's NLL" (Adam, minibatches of 4096, seeded)."""
    z, nll = tr['z'][:-1].flatten(0, 1), tr['nll']
    label = (nll[:-1] > nll[1:]).float().flatten()
    torch.manual_seed(0)
    router = Router(z)
    opt = torch.optim.Adam(router.net.parameters(), lr=3e-3)
    with torch.enable_grad():
        for _ in range(steps):
            b = torch.randint(len(z), (4096,))
            opt.zero_grad()
            F.binary_cross_entropy(router(z[b]), label[b]).backward()
            opt.step()
    return router.eval()

def causal(tr, c, T):
    """-> {policy: (its sweep, stop(t, j, view) -> (N,) bool, True: stop at depth j)}, fit on tr."""
    block = fr.block_flops(c, T) / 1e6  # MFLOP a depth more ('readout': and its readout)
    readout = fr.flops(c, T, 0) / 1e6 - c.n_prelude * block
    def linear(kind, step):  # stop where no later depth's predicted gain pays its price
        weights = fit_gains(tr, kind)
        return PRICES, lambda t, j, v: stops(weights[j], features(v, kind), t, step)
    router = fit_router(tr)
    return {'causal: free': linear('free', block), 'causal: state': linear('state', block),
            'causal: readout': linear('readout', block + readout),
            'router': (THRESHOLDS, lambda t, j, v: router(v['z']) < t)}

@torch.no_grad()
def selection(tr, kind, sweep, stop, c, T):  # -> a causal policy's points, selection protocol
    K, last = len(tr['nll']), torch.ones(tr['nll'].size(1), dtype=torch.bool)  # (K: all stop)
    points = []
    for t in sweep:
        first = fr.select(tr['nll'], torch.stack([stop(t, j, view(tr, j)) for j in range(K - 1)]
                                                 + [last]))[1]  # each token's first stop
        points.append(scored(t, picked(tr['nll'], first), first, c, T, kind))
    return points

class Stop:
    """A causal policy as a rule of decode.Exit's protocol, which Loop.per_token asks after step
    i: rule(i, z, resid, running) -> (B, T) bool, True where a token stops now; rule.output(z),
    the segment's output; rule.ponder, ACT's cost (None). It reads what `selection` reads."""
    ponder = None

    def __init__(self, model, x, kind, stop, t):
        self.model, self.kind, self.stop, self.t = model, kind, stop, t
        self.pos, self.cls = torch.arange(x.size(1)).expand_as(x), byte_class(x)

    def __call__(self, i, z, resid, running):
        if i == self.model.config.loops[0] - 1:  # (the last step: every token stops)
            return torch.ones_like(running)
        v = dict(z=z, resid=resid, znorm=z.norm(dim=-1), pos=self.pos, cls=self.cls)
        if self.kind == 'causal: readout':  # (its readout: counted in cost())
            _, v['maxprob'], v['entropy'] = read(self.model, z)
        return self.stop(self.t, i, v)

    def output(self, z):
        return z

@torch.no_grad()
def frozen(model, rows, kind, sweep, stop):
    """-> the policy's points in the frozen protocol: GPT.forward's lines (embed, prelude,
    Loop.per_token with the rule, readout); a stopped token frozen, later tokens attend to it."""
    c, T, points = model.config, rows.size(1), []
    for t in sweep:
        nll, depth = [], []
        for x in rows.split(batch_size):
            rule = Stop(model, x, kind, stop, t)
            z, run = model.segments[0].per_token(embed(model, x), c.loops[0], rule)
            nll.append(nll_of(model.readout(z).float(), x).flatten())
            depth.append(run.depth[:, :-1].flatten())
        points.append(scored(t, torch.cat(nll), torch.cat(depth), c, T, kind))
    return points

@torch.no_grad()
def frozen_exit(model, rows):  # -> the resid exit's points, as the model runs it (frozen)
    c, T, points = model.config, rows.size(1), []
    for t in RESID:
        nll, depth = [], []
        for x in rows.split(batch_size):
            logits, _, info = model(x, exit=('resid', t))
            nll.append(nll_of(logits.float(), x).flatten())
            depth.append(info['depth'][:, :-1].flatten())
        points.append(scored(t, torch.cat(nll), torch.cat(depth), c, T))
    return points

# ----------------------------------------------------------------------------- a run
def checkpoint(arm, seed, finished=False):  # -> its path; finished: whether trained to the end
    path = os.path.join(runs, f'{arm}-s{seed}', 'ckpt.pt')
    if not finished:
        return path
    ckpt = torch.load(path, map_location='cpu', weights_only=True) if os.path.exists(path) else {}
    return ckpt.get('iter_num', -1) >= ckpt.get('config', {}).get('max_iters', 0)

def measure(arm, seed, partner):
    """-> one run's points: its uniform depths, each policy's sweep, and the frozen sweep of the
    causal policy best on the training rows (its mean NLL minus the hull over MEAN_DEPTHS)."""
    start = time.time()
    model, other = (load_checkpoint(checkpoint(arm, s), GPT.from_checkpoint, 'cpu')[0].eval()
                    for s in (seed, partner))
    c, T, K = model.config, model.config.block_size, model.config.loops[0]
    held = ev.val_rows(load_tokens(data, 'val'), T, n_rows, seed=1337)  # frontier.measure's
    tr = trace(model, ev.val_rows(load_tokens(data, 'train'), T, train_rows, seed=train_seed))
    ho, other = trace(model, held), trace(other, held)['nll']
    per_depth = fr.flops(c, T, torch.arange(1, K + 1).double())
    uniform = lambda nll: [dict(t=k, depth=k, nll=nll[k - 1].mean().item(),
                                flops=per_depth[k - 1].item()) for k in range(1, K + 1)]
    sweep = lambda pick: [scored(lam, picked(ho['nll'], d), d, c, T)
                          for lam in PRICES for d in [pick(lam)]]
    policies = {'oracle': sweep(lambda lam: priced(ho['nll'], per_depth, lam)),
                'seed-pair oracle': sweep(lambda lam: priced(other, per_depth, lam)),
                'class lookup': sweep(lambda lam: lookup(ho, per_depth, lam))}
    rules, on_training = causal(tr, c, T), {}
    for kind, rule in rules.items():
        policies[kind] = selection(ho, kind, *rule, c, T)
        diffs = minus_hull(selection(tr, kind, *rule, c, T), uniform(tr['nll']))
        on_training[kind] = np.mean([d for d in diffs if d == d] or [1.0])  # (none reached)
    policies['resid exit'] = [scored(t, picked(ho['nll'], d), d, c, T)
                              for t in RESID for d in [fr.select(ho['nll'], ho['resid'] < t)[1]]]
    best = min(on_training, key=on_training.get)
    policies['frozen'] = frozen(model, held, best, *rules[best])
    policies['frozen resid exit'] = frozen_exit(model, held)
    return dict(model=arm, seed=seed, partner=partner, ran_on=ran_on(), tokens=ho['nll'].size(1),
                rows=dict(held_out=(n_rows, 1337), training=(train_rows, train_seed)),
                uniform=uniform(ho['nll']), policies=policies, frozen=best,
                on_training=on_training, seconds=round(time.time() - start, 1))

# ----------------------------------------------------------------------------- the page
FROZEN = 'frozen: the causal policy best on the training rows'
AGAINST = 'frozen: that policy minus the frozen resid exit'
POLICIES = ''.join(line + '\n' for line in __doc__.split('\n') if line.startswith('  '))

def note(path):  # the page's answer, written by hand: the '> ' block under its title, kept
    lines = open(path).read().split('\n')[2:] if os.path.exists(path) else []
    note = lines[:next((i for i, line in enumerate(lines) if not line.startswith('>')), 0)]
    return '\n'.join(note) + '\n\n' if note else ''

def cell(diffs):  # mean ± SE over the seeds (in nats: 4 digits) and the verdict
    return 'not reached' if np.isnan(diffs).any() else f"{fr.pm(diffs, 4)}, {fr.verdict(diffs)}"

def page(done, path):
    header = [f'm={m:g}' for m in MEAN_DEPTHS]
    hull = lambda per: zip(*[[on(r['uniform'], x) for x in at_depths(r['uniform'])] for r in per])
    out = ["# Per-token depth: how much room can a policy learn?\n", note(path) +
           "Written by `python lab/room/room.py` from `lab/room/policies/*.json`. The policies "
           "(from its docstring):\n\n```\n" + POLICIES + "```\n\nPer run: frontier.measure's "
           f"{n_rows} held-out rows, and {train_rows} training rows of train.bin (seed "
           f"{train_seed}) that the causal policies are fit on. Every policy but the last row's "
           "is measured in the selection protocol (each token run to every depth; its choice "
           "reads that depth's logits); the last row runs "
           "the causal policy best on the training rows in the frozen one (Loop.per_token). "
           "The uniform hull: the lower convex hull of the model's own depths 1..12 in (FLOPs, "
           "NLL), i.e. a random mix of two depths, flat past its lowest NLL; each policy's sweep "
           "is made a curve the same way. A cell: the policy's val NLL minus the hull's at the "
           "same forward FLOPs per token (the policy's own included), the FLOPs of uniform depth "
           "m, per seed; then mean ± SE over the seeds (paired: same rows), a **finding** when "
           "|mean| > t(0.975, n-1) SE. Negative: the policy beats uniform depth. "
           + fr.where_ran(done) + "\n",
           "## The uniform hull: val NLL at mean depth m\n",
           fr.table(['arm', 'seeds', *header], [[arm, len(per), *map(fr.pm, hull(per.values()))]
                                                for arm, per in done.items()])]
    for arm, per in done.items():
        per = [per[s] for s in sorted(per)]
        rows = [[FROZEN if p == 'frozen' else p, *map(cell, zip(*[
            minus_hull(r['policies'][p], r['uniform']) for r in per]))] for p in per[0]['policies']]
        hull = lambda r, p: minus_hull(r['policies'][p], r['uniform'])
        against = lambda r: np.subtract(hull(r, 'frozen'), hull(r, 'frozen resid exit'))
        rows.append([AGAINST, *map(cell, zip(*map(against, per)))])  # (same FLOPs, same seed)
        out += [f"## `{arm}`: NLL minus the uniform hull at mean depth m\n",
                fr.table(['policy', *header], rows),
                "Frozen: " + ', '.join(f"seed {r['seed']}: {r['frozen']}" for r in per) + ". The "
                "seed-pair oracle picks with seeds " + ', '.join(str(r['partner']) for r in per) +
                f". Time per run: {np.mean([r['seconds'] for r in per]):.0f} s (one thread).\n"]
    return '\n'.join(out + [RERUN])

RERUN = """## How to rerun

```
python lab/frontier.py --results=lab/room --runs=out-room/runs --jobs=2 '--seeds=(1,2,3,4,5)' \\
    --models=multi+w100+lr4.5e-3,single+w100+lr4.5e-3,exit-10-early+w100+lr4.5e-3
python lab/room/room.py --runs=out-room/runs
```
The second measures each run that has no `lab/room/policies/<arm>-s<seed>.json` yet, once its
checkpoint and its partner's (the next seed's) are trained to the end, then draws this page.
"""

def main():
    done = {}
    for arm in models.split(','):
        for i, seed in enumerate(seeds):
            path = os.path.join(results, 'policies', f'{arm}-s{seed}.json')
            partner = seeds[(i + 1) % len(seeds)]  # the seed-pair oracle's: the next seed
            if not os.path.exists(path):  # (a measured run is kept: never measured again)
                if not (checkpoint(arm, seed, True) and checkpoint(arm, partner, True)):
                    print(f"{arm} seed {seed}: waits for its checkpoint and seed {partner}'s")
                    continue
                out = measure(arm, seed, partner)
                with saving(path, 'of the measurements') as tmp, open(tmp, 'w') as f:
                    json.dump(out, f, indent=1)
                print(f"measured {arm} seed {seed} in {out['seconds']:.0f} s: {path}", flush=True)
            done.setdefault(arm, {})[seed] = json.load(open(path))
    drawn(path := os.path.join(results, 'room.md'), page(done, path))
    print(f"wrote {path}")

if __name__ == '__main__':
    exec(open(os.path.join(fr.HERE, 'configurator.py')).read())
    torch.set_num_threads(1)  # one thread: a training campaign may hold the other cores
    main()
