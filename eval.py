"""Evaluate a tied-depth checkpoint: the paper's suffix NLL (masked and unmasked, with the pad fraction), NLL against
loop depth, post-hoc early exit against uniform depth, loop depth per topic, the residual-norm probe and the alphas.
$ python eval.py --out_dir=out-smoke [--html=depth.html]   (prints a report, writes out_dir/eval.json)"""
import os, json, math, time, html as html_lib
from contextlib import nullcontext
import numpy as np
import torch
import torch.nn.functional as F
from model import load_checkpoint
from prepare import get_tokenizer, load_meta, load_tokens, read_eval_docs

# -----------------------------------------------------------------------------
out_dir = 'out'         # reads out_dir/ckpt.pt and data/<its dataset>/, writes out_dir/eval.json
device = 'cuda' if torch.cuda.is_available() else 'cpu'
batch_size = 8
eval_iters = 10         # val batches for the depth scan and the early-exit curve
block_size = 0          # 0 = the model's
suffix_start = 0        # first scored target position; 0 = the paper's 193 of 256, scaled to block_size
exit_kind = 'maxprob'   # post-hoc exit: 'maxprob' (stop once confident) or 'resid' (stop once the state stops moving)
thresholds = ()         # () = the default sweep for exit_kind
topic_threshold = 0.0   # the exit threshold that gives per-topic depth without ACT; 0 = the default for exit_kind
max_docs = 200          # eval.jsonl documents per topic
html = ''               # write the depth map to this file
seed = 1337
# -----------------------------------------------------------------------------
DEFAULTS = {'maxprob': ((0.3, 0.5, 0.7, 0.9, 0.95, 0.99), 0.9), 'resid': ((0.2, 0.1, 0.05, 0.02, 0.01), 0.05)}
ctx = nullcontext()     # float32 on CPU; bf16 autocast on CUDA (set below)

def pack_docs(docs_tokens, eot, T):
    """Each document + EOT -> one row of T tokens, truncated or right-padded with EOT. real[i, j]: position j holds the
    document, up to and including its first EOT -- decided by position, not by id, because every pad IS an EOT."""
    x, real = torch.full((len(docs_tokens), T), eot), torch.zeros(len(docs_tokens), T, dtype=torch.bool)
    for i, toks in enumerate(docs_tokens):
        toks = (list(toks) + [eot])[:T]
        x[i, :len(toks)], real[i, :len(toks)] = torch.tensor(toks), True
    return x, real

@torch.no_grad()
def score(model, x, n_loops=None, exit=None, label='eval docs'):
    """Per-token (nll, depth, resid) of token rows: nll[:, j - 1] scores target position j (logits at j - 1 predict x[:, j]).
    Not the model's loss: that is the training objective (a mean over supervised depths, plus the ACT ponder cost)."""
    out, t0 = [], time.time()
    for i in range(0, len(x), batch_size):
        xb = x[i:i + batch_size].to(device)
        with ctx:
            logits, _, info = model(xb, n_loops=n_loops, exit=exit)
        nll = F.cross_entropy(logits[:, :-1].float().transpose(1, 2), xb[:, 1:], reduction='none')
        out.append((nll.cpu(), info['depth'].cpu(), info['resid'].float().cpu()))
        if time.time() - t0 > 5:  # a counter, every 5 s of a slow eval
            print(f"  {label}: {len(xb) + i}/{len(x)} rows", flush=True)
            t0 = time.time()
    return [torch.cat(t) for t in zip(*out)]

def suffix_nll(nll, real, start):
    """The paper's benchmark: loss on target positions [start, T) only. 'unmasked' counts every one, pad included; 'masked'
    only real tokens. Report both and the pad share: when most targets are pad, the two can rank models oppositely."""
    nll, real = nll[:, start - 1:], real[:, start:]
    return dict(masked=nll[real].mean().item() if real.any() else None, unmasked=nll.mean().item(),
                pad_fraction=1 - real.float().mean().item())

def val_rows(data, T):
    """eval_iters * batch_size rows of T val tokens at fixed, seeded positions: every depth is scored on the same text."""
    if len(data) <= T:
        raise ValueError(f"val.bin has {len(data)} tokens, too few for block_size {T}: set a smaller --block_size")
    ix = torch.randint(len(data) - T, (eval_iters * batch_size,), generator=torch.Generator().manual_seed(seed))
    return torch.stack([torch.from_numpy(data[i:i + T].astype(np.int64)) for i in ix.tolist()])

def val_nll(model, rows, n_loops=None, exit=None):
    """(mean NLL, mean loop iterations per predicting token) on the val rows."""
    nll, depth, _ = score(model, rows, n_loops, exit, label=f"val, {f'exit {exit}' if exit else f'k={n_loops}'}")
    return nll.mean().item(), depth[:, :-1].float().mean().item()

def depth_scan(model, rows):
    """Val NLL with every tied segment looped k = 1, 2, 4, ... times up to the trained depth, and at twice it. Trained at
    the final depth only, NLL falls with k; trained at every depth, it is flat from k = 1 (the trade-off law)."""
    train = max(model.config.loops, default=0)
    ks = sorted({1 << i for i in range(train.bit_length())} | {train, 2 * train}) if train else [0]  # 0: plain model
    return [dict(zip(('k', 'nll', 'mean_depth'), (k, *val_nll(model, rows, k or None)))) for k in ks]

def early_exit_curve(model, rows, scan):
    """Post-hoc per-token exit (a token stops looping once exit_kind passes the threshold) beside uniform depth at the same
    mean compute (interpolated between the whole depths around it). None for ACT: its gate can't be switched off."""
    uniform, n_seg, out = {s['k']: s['nll'] for s in scan}, len(model.config.loops), []
    for t in (thresholds or DEFAULTS[exit_kind][0]) if n_seg and not model.config.act else []:
        nll, d = val_nll(model, rows, exit=(exit_kind, t))
        for k in {max(1, math.floor(d / n_seg)), math.ceil(d / n_seg)} - set(uniform):
            uniform[k] = val_nll(model, rows, k)[0]
        u = np.interp(d / n_seg, *zip(*sorted(uniform.items())))  # piecewise linear through the measured (k, NLL)
        out.append(dict(threshold=t, mean_depth=d, nll=nll, uniform_nll=float(u)))
    return out

def topic_depths(nll, depth, real, topics):
    """Per topic: NLL over every real target of its documents (the whole first block, not only the suffix: more tokens,
    less noise), the mean iterations used by the tokens that made those predictions, and how many there were."""
    masks = {t: real[:, 1:] & torch.tensor([d == t for d in topics])[:, None] for t in sorted(set(topics))}
    return {t: dict(nll=nll[m].mean().item(), mean_depth=depth[:, :-1][m].float().mean().item(), tokens=int(m.sum()))
            for t, m in masks.items()}

def residual_probe(nll, resid, real):
    """Pearson r between each real token's final relative residual |z_k - z_k-1| / |z_k-1| and the NLL of its prediction:
    does a state that is still moving signal uncertainty? (The paper: weakly, r = +0.27..0.39.)"""
    m = real[:, 1:]
    with np.errstate(all='ignore'):  # a constant residual (no loop) has no correlation: None
        r = np.corrcoef(resid[:, :-1][m].numpy(), nll[m].numpy())[0, 1] if m.sum() > 1 else np.nan
    return None if np.isnan(r) else float(r)

def svg_chart(title, series):
    """NLL against mean depth as a small line chart in hand-written SVG; series = [(name, colour, [(depth, nll), ...])]."""
    (x0, x1), (y0, y1) = [(min(v), max(v) + 1e-9) for v in zip(*[p for _, _, ps in series for p in ps] or [(0, 0)])]
    s = (f'<svg width="400" height="200" font-size="11"><text x="50" y="12">{title}</text><text y="34">{y1:.2f}</text>'
         f'<text y="170">{y0:.2f}</text><text x="50" y="192">depth {x0:.1f}</text><text x="300" y="192">{x1:.1f}</text>')
    xy = lambda x, y: f"{50 + 280 * (x - x0) / (x1 - x0):.1f},{170 - 140 * (y - y0) / (y1 - y0):.1f}"
    for i, (name, col, ps) in enumerate(series):
        pix = ' '.join(xy(x, y) for x, y in sorted(dict(ps).items()))  # sorted by depth, one point per depth
        s += f'<polyline fill="none" stroke="{col}" points="{pix}"/><text x="300" y="{30 + 14 * i}" fill="{col}">{name}</text>'
    return s + '</svg>'

def write_html(path, docs, tokens, depth, decode, r):
    """The depth map: three documents per topic, each token's background coloured by the iterations it used, under a chart
    of NLL against mean depth. All document text goes through html.escape, so markup shows as text and never runs."""
    top, e, ee = max(int(depth.max()), 1), html_lib.escape, r['early_exit']
    colour = lambda d: f"hsl({220 - 220 * d / top:.0f},85%,82%)"  # blue: few iterations ... red: many
    uniform = [(s['mean_depth'], s['nll']) for s in r['depth_scan']] + [(c['mean_depth'], c['uniform_nll']) for c in ee]
    chart = svg_chart('val NLL against mean depth', [('per-token exit', 'crimson', [(c['mean_depth'], c['nll']) for c in ee]),
                                                     ('uniform depth', 'steelblue', uniform)])
    legend = ''.join(f'<span style="background:{colour(d)}">&nbsp;{d}&nbsp;</span>' for d in range(int(depth.min()), top + 1))
    page = [f'<!doctype html><meta charset="utf-8"><title>nanoloop depth map</title><body style="font-family:sans-serif">'
            f'<h2>Loop depth per token</h2>{chart}<p>Depth from {e(r["depth_source"])}. Iterations: {legend}</p>']
    for i, doc in enumerate(docs):  # docs come grouped by topic: show each topic's first three
        if i < 3 or docs[i - 3]['topic'] != doc['topic']:
            # each token is coloured by the depth spent predicting it (at the position before); zip stops at the block
            spans = e(decode(tokens[i][:1])) + ''.join(f'<span title="{d}" style="background:{colour(d)}">{e(decode([t]))}</span>'
                                                       for t, d in zip(tokens[i][1:], depth[i].tolist()))
            page.append(f'<h3>{e(doc["topic"])}</h3><div style="white-space:pre-wrap;font-family:monospace">{spans}</div>')
    with open(path, 'w', encoding='utf-8') as f:
        f.write('\n'.join(page) + '</body>\n')

def print_report(r):
    s, f = r['suffix_nll'], lambda v: 'n/a' if v is None else f"{v:.3f}"
    print(f"\nsuffix NLL ({r['eval_docs']} docs, targets {r['suffix_start']}..{r['block_size'] - 1}): masked (real tokens) "
          f"{f(s['masked'])} | unmasked (all) {f(s['unmasked'])} | pad {s['pad_fraction']:.1%}")
    if s['pad_fraction'] > 0.05:  # the paper's benchmark was 61.6% pad, and ranking by it inverted the leaderboard
        print(f"  note: {s['pad_fraction']:.0%} of the scored targets are padding (over 5%): the unmasked NLL mostly measures padding; rank by masked")
    print("\ndepth scan (val; k loops in every segment):" + ''.join(
        f"\n  k={d['k']:<4} mean depth {d['mean_depth']:6.2f}   NLL {d['nll']:.3f}" for d in r['depth_scan']))
    print(f"\nearly exit ({exit_kind}, per token, post hoc) vs uniform depth at the same mean compute (diff < 0: exit wins):"
          + (''.join(f"\n  threshold {c['threshold']:<5} mean depth {c['mean_depth']:6.2f}   NLL {c['nll']:.3f}   uniform NLL "
                     f"{c['uniform_nll']:.3f}   diff {c['nll'] - c['uniform_nll']:+.3f}" for c in r['early_exit'])
             or "\n  none: the ACT gate already picks each token's depth (see topics), or there is no loop"))
    print(f"\ntopics (NLL over all real tokens of each doc's first block; depth from {r['depth_source']}):" + ''.join(
        f"\n  {n[:16]:16} {t['tokens']:7d} tokens   NLL {f(t['nll'])}   mean depth {t['mean_depth']:6.2f}"
        for n, t in r['topics'].items()))
    print(f"\nresidual probe: Pearson r(final relative residual, NLL) over real tokens = {f(r['residual_probe_r'])}\n"
          f"alphas: {' '.join(f'{a:.3f}' for a in r['alphas'])}\nskipped {r['skipped_lines']} malformed lines of eval.jsonl")

if __name__ == '__main__':
    exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'configurator.py')).read())
    if exit_kind not in DEFAULTS:
        raise ValueError(f"exit_kind='{exit_kind}' is unknown: use --exit_kind=maxprob or --exit_kind=resid")
    topic_threshold = topic_threshold or DEFAULTS[exit_kind][1]
    ctx = torch.autocast('cuda', dtype=torch.bfloat16) if 'cuda' in device else nullcontext()
    model, ckpt = load_checkpoint(os.path.join(out_dir, 'ckpt.pt'), device)
    model.eval()
    c, T = model.config, block_size or model.config.block_size
    if T > c.block_size:
        raise ValueError(f"block_size={T} is larger than the model's {c.block_size}: use --block_size=0 (the model's) or less")
    start = min(max(suffix_start or round(193 * T / 256), 1), T - 1)  # the paper scores 193..255 of 256; the report shows it
    data_dir = os.path.join('data', ckpt['config']['dataset'])
    meta = load_meta(data_dir)
    if meta['vocab_size'] != c.vocab_size:
        raise ValueError(f"{data_dir}/meta.json has vocab_size {meta['vocab_size']} but the checkpoint has {c.vocab_size}: "
                         f"re-run prepare.py for {data_dir} with the tokenizer the model was trained with")
    encode, decode, eot = get_tokenizer(meta['tokenizer'])
    docs, n_bad = read_eval_docs(os.path.join(data_dir, 'eval.jsonl'))
    docs = [d for t in dict.fromkeys(d['topic'] for d in docs) for d in [e for e in docs if e['topic'] == t][:max_docs]]
    if not docs:
        raise ValueError(f"{data_dir}/eval.jsonl has no usable documents ({n_bad} malformed lines): re-run prepare.py")
    tokens = [encode(d['text']) for d in docs]
    x, real = pack_docs(tokens, eot, T)
    full = score(model, x)  # at the trained depth: suffix NLL, topic NLL, residual probe (and the ACT gate's depth)
    src = 'the ACT gate' if c.act else f"post-hoc {exit_kind} exit at threshold {topic_threshold}" if c.loops else 'no loop'
    gated = full if c.act or not c.loops else score(model, x, exit=(exit_kind, topic_threshold))
    rows = val_rows(load_tokens(data_dir, 'val'), T)
    scan = depth_scan(model, rows)
    result = dict(suffix_nll=suffix_nll(full[0], real, start), depth_scan=scan, early_exit=early_exit_curve(model, rows, scan),
                  topics=topic_depths(full[0], gated[1], real, [d['topic'] for d in docs]),
                  residual_probe_r=residual_probe(full[0], full[2], real), alphas=model.alphas(), depth_source=src,
                  block_size=T, suffix_start=start, eval_docs=len(docs), skipped_lines=n_bad)
    print_report(result)
    with open(os.path.join(out_dir, 'eval.json'), 'w') as f:
        json.dump(result, f, indent=2)
    if html:
        write_html(html, docs, tokens, gated[1], decode, result)
    print(f"wrote {f.name}" + (f" and {html}" if html else ''))
