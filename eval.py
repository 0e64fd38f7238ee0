"""
Evaluate a tied-depth checkpoint -> out_dir/eval.json: the paper's suffix NLL (masked, unmasked,
pad fraction), NLL by loop depth, early exit against uniform depth, depth per topic, probes.
$ python eval.py --out_dir=out-smoke [--html=out-smoke/depth.html]
$ python eval.py --out_dir=out-cpu-single,out-cpu-sft --dataset=sft  # in turn, each its eval.json
"""
import os, sys, json, math
import guards  # (first: its one handler covers the imports too, Ctrl-C included)
import numpy as np
import torch
import torch.nn.functional as F
from model import GPT
from decode import autocast
from prepare import get_tokenizer, token_rows, load_meta, load_tokens, read_eval_docs
from depthmap import html_page

# -----------------------------------------------------------------------------
out_dir = 'out'  # reads out_dir/ckpt.pt and data/<its dataset>/, writes out_dir/eval.json
dataset = ''  # '' = each model's own; 'topics', 'sft' (its held-out samples), ...
device = ''  # '' = cuda if available, else cpu
dtype = ''  # '' = the dtype the model was trained with
batch_size = 8
eval_iters = 10  # val batches for the depth scan and the early-exit curve
exit_kind = ''  # post-hoc exit: 'maxprob' (once confident; '' = it), 'resid' (once still)
thresholds = ()  # the early-exit curve's; () = DEFAULTS[exit_kind]
max_docs = 200  # eval.jsonl documents per topic
html = ''  # write the depth map to this file (several out_dirs: to this name in each)
# -----------------------------------------------------------------------------
DEFAULTS = {'maxprob': (0.3, 0.5, 0.7, 0.9, 0.95, 0.99), 'resid': (0.2, 0.1, 0.05, 0.02, 0.01)}

def pack_docs(docs_tokens, eot, T):
    """Each document + EOT -> a row of T tokens, cut or padded with EOT. real: position j holds
    the document, up to its first EOT (by position: every pad IS an EOT)."""
    x = torch.full((len(docs_tokens), T), eot)
    for i, toks in enumerate(docs_tokens):
        x[i, :len(toks) + 1] = torch.tensor(list(toks) + [eot])[:T]
    ends = torch.tensor([len(toks) + 1 for toks in docs_tokens])  # each row's first pad
    return x, torch.arange(T) < ends[:, None]

def doc_rows(data_dir, T, max_docs):
    """The first max_docs documents of each topic -> docs, tokens, x (N, T), real (N, T - 1:
    is each prediction's target real), n_bad (malformed lines)."""
    encode, _, eot = get_tokenizer(load_meta(data_dir)['tokenizer'])
    docs, n_bad = read_eval_docs(os.path.join(data_dir, 'eval.jsonl'))
    topics = dict.fromkeys(d['topic'] for d in docs)
    docs = [d for t in topics for d in [d for d in docs if d['topic'] == t][:max_docs]]
    # an SFT sample is its prompt, EOT, its answer (and pack_docs adds EOT, padding)
    tokens = [encode(d['text']) + ([eot] + encode(d['answer']) if 'answer' in d else [])
              for d in docs]
    x, real = pack_docs(tokens, eot, T)
    if cut := sum(len(t) >= T for t, d in zip(tokens, docs) if 'answer' in d):  # never silent
        print(f"note: {cut} of {sum('answer' in d for d in docs)} SFT samples are longer than "
              f"the block ({T} tokens): their ends are cut", file=sys.stderr)
    return docs, tokens, x, real[:, 1:], n_bad

@torch.no_grad()
def score(model, x, batch_size, n_loops=None, exit=None):
    """-> nll, depth, resid, entropy of each prediction in rows x (N, T - 1: column j predicts
    x[:, j + 1])."""
    out, progress, device = [], guards.Progress(sys.stderr), model.head.weight.device
    for i in range(0, len(x), batch_size):
        xb = x[i:i + batch_size].to(device)
        logits, _, info = model(xb, n_loops=n_loops, exit=exit)
        logits = logits[:, :-1].float()  # the last position predicts nothing in the row
        nll = F.cross_entropy(logits.transpose(1, 2), xb[:, 1:], reduction='none')
        entropy = -(logits.softmax(-1) * logits.log_softmax(-1)).sum(-1)
        out.append([nll, info['depth'][:, :-1], info['resid'][:, :-1].float(), entropy])
        progress(f"  {i + len(xb)}/{len(x)} rows scored")  # a slow eval
    return [torch.cat(column).cpu() for column in zip(*out)]

def suffix(T):
    """The targets the paper's benchmark scores: its positions 193..255 of a 256-token row, scaled
    to T -> (the first, the columns of score that predict them)."""
    start = min(max(round(193 * T / 256), 1), T - 1)
    return start, slice(start - 1, None)

def suffix_nll(nll, real, columns):
    """The loss on the suffix's targets, 'unmasked' over all, 'masked' over the real ones: when
    most are pad the two can rank models oppositely."""
    nll, real = nll[:, columns], real[:, columns]
    return dict(masked=nll[real].mean().item() if real.any() else None, unmasked=nll.mean().item(),
                pad_fraction=1 - real.float().mean().item())

def val_rows(data, T, n, seed=1337):
    """n rows of T val tokens at fixed, seeded positions: every depth is scored on the same text."""
    ix = torch.randint(len(data) - T, (n,), generator=torch.Generator().manual_seed(seed))
    return torch.from_numpy(token_rows(data, ix.tolist(), T))

def val_nll(model, rows, batch_size, n_loops=None, exit=None):  # -> (mean NLL, mean depth)
    nll, depth, *_ = score(model, rows, batch_size, n_loops, exit)
    return nll.mean().item(), depth.float().mean().item()

def depth_scan(model, rows, batch_size):
    """Val NLL with every tied segment looped k = 1, 2, 4, ... up to twice the trained depth.
    Trained at the last depth, NLL falls with k; at every depth, it is flat (the trade-off law)."""
    trained = max(model.config.loops, default=0)
    ks = sorted({2 ** i for i in range(trained.bit_length())} | {trained, 2 * trained})
    scan = [(k, *val_nll(model, rows, batch_size, k or None)) for k in ks]
    return [dict(k=k, nll=nll, mean_depth=mean_depth) for k, nll, mean_depth in scan]

def early_exit_curve(model, rows, scan, batch_size, kind, thresholds):
    """Post-hoc per-token exit at each threshold, beside uniform depth at the same mean compute
    (interpolated). None with ACT (its gate picks) or without a loop."""
    if not model.config.exit_kinds():
        return []
    uniform = {s['k']: s['nll'] for s in scan}  # k -> NLL, filled in where the curve needs it
    curve = []
    for t in thresholds:
        nll, mean_depth = val_nll(model, rows, batch_size, exit=(kind, t))
        k = mean_depth / len(model.config.loops)  # the same compute as k in every segment
        for whole in {max(1, math.floor(k)), math.ceil(k)} - set(uniform):
            uniform[whole] = val_nll(model, rows, batch_size, whole)[0]
        ks, nlls = zip(*sorted(uniform.items()))
        u = float(np.interp(k, ks, nlls))
        curve.append(dict(threshold=t, mean_depth=mean_depth, nll=nll, uniform_nll=u))
    return curve

def topic_depths(nll, depth, real, topics):
    """Per topic, over the real targets of its documents (all, not the suffix: less noise): NLL,
    mean depth, how many."""
    masks = {t: real & torch.tensor([d == t for d in topics])[:, None] for t in sorted(set(topics))}
    return {t: dict(nll=nll[m].mean().item(), mean_depth=depth[m].float().mean().item(),
                    tokens=int(m.sum())) for t, m in masks.items()}

def probe(nll, signal, real):
    """Pearson r between a per-token signal and the NLL of its prediction, over real targets: does
    a state that still moves signal uncertainty? (The paper: r = +0.27..0.39, for resid.)"""
    with np.errstate(all='ignore'):  # undefined (None) for a constant residual: no loop
        r = np.corrcoef(signal[real].numpy(), nll[real].numpy())[0, 1] if real.sum() > 1 else np.nan
    return None if np.isnan(r) else float(r)

def print_report(r):  # eval.json's numbers, a line a row
    fmt = lambda v: 'n/a' if v is None else f"{v:.3f}" if type(v) is float else v
    line = lambda row: '   '.join(f"{k} {fmt(v)}" for k, v in row.items())
    print(f"\nsuffix NLL ({r['eval_docs']} docs, targets {r['suffix_start']}..{r['block_size'] - 1}"
          f"): {line(r['suffix_nll'])}")
    if r['suffix_nll']['pad_fraction'] > 0.05:  # the paper's 61.6% inverted its leaderboard
        print("  note: the unmasked NLL mostly measures padding: rank by masked")
    topics = [{'topic': t, **v} for t, v in r['topics'].items()]
    tables = {'depth scan': r['depth_scan'], f"early exit ({r['exit_kind']})": r['early_exit'],
              f"topics (depth: {r['depth_source']})": topics}
    for title, rows in tables.items():
        print(f"\n{title}:" + ' none' * (not rows))
        for row in rows:
            print('  ' + line(row))
    print(f"\nprobes of NLL (Pearson r): {line(r['probes'])}\n"
          f"alphas: {' '.join(map(fmt, r['alphas']))}\n"
          f"skipped {r['skipped_lines']} malformed lines of eval.jsonl")

def load(out_dir, html):  # -> (model, data_dir, T, precision, report): one model, data, checked
    path = os.path.join(out_dir, 'ckpt.pt')
    model, ckpt = guards.load_checkpoint(path, GPT.from_checkpoint, device)
    T = model.config.block_size
    own = ckpt['config']['dataset']  # the model's data, or --dataset's in the model's tokenizer
    data_dir = 'data/' + (dataset or own).removesuffix('_byte') + '_byte' * own.endswith('_byte')
    meta, val = load_meta(data_dir), load_tokens(data_dir, 'val')
    guards.check_eval(model, ckpt, meta, len(val), data_dir, T, out_dir, html, exit_kind,
                      thresholds, batch_size, device)
    # eval.json on the model's own data; eval_<data>.json on other data (each kept)
    name = 'eval' + (f"_{os.path.basename(data_dir)}" if data_dir != f'data/{own}' else '')
    guards.check_output(report := os.path.join(out_dir, name + '.json'), 'out_dir', fix=(
        f"copy the model where you can write (cp -r {out_dir} ~/copy) and give --out_dir=~/copy"))
    precision = autocast(device, dtype, trained=ckpt['config'].get('dtype', ''))
    return model.eval(), data_dir, T, precision, report

@torch.no_grad()
def evaluate(path, model, data_dir, T, html, precision):
    """One checked model, with the settings above -> its report at path, its depth map."""
    c = model.config
    start, columns = suffix(T)
    docs, tokens, x, real, n_bad = doc_rows(data_dir, T, max_docs)
    nll, depth, resid, entropy = score(model, x, batch_size)  # at the trained depth
    probes = {'relative residual': probe(nll, resid, real), 'entropy': probe(nll, entropy, real)}
    source = 'the ACT gate' if c.act else 'the trained depth' if c.loops else 'no loop'
    rows = val_rows(load_tokens(data_dir, 'val'), T, eval_iters * batch_size)
    scan = depth_scan(model, rows, batch_size)
    report = dict(suffix_nll=suffix_nll(nll, real, columns), depth_scan=scan,
                  early_exit=early_exit_curve(model, rows, scan, batch_size, exit_kind, thresholds),
                  topics=topic_depths(nll, depth, real, [d['topic'] for d in docs]),
                  residual_probe_r=probes['relative residual'], probes=probes,
                  alphas=model.alphas(), depth_source=source, block_size=T, suffix_start=start,
                  eval_docs=len(docs), skipped_lines=n_bad, exit_kind=exit_kind,
                  docs=os.path.join(data_dir, 'eval.jsonl'),
                  settings=dict(eval_iters=eval_iters, batch_size=batch_size, max_docs=max_docs,
                                thresholds=list(thresholds), precision=precision, device=device,
                                ran_on=guards.ran_on()))  # what this report was computed with
    with guards.written(path) as f:  # written before it is shown: a closed stdout loses nothing
        json.dump(report, f, indent=2)
    if html:  # each topic's first three documents (docs come grouped by topic)
        shown = [i for i, d in enumerate(docs) if i < 3 or docs[i - 3]['topic'] != d['topic']]
        # without ACT, the depth each token takes under the curve's middle exit
        exit = (exit_kind, thresholds[len(thresholds) // 2]) if c.exit_kinds() else None
        shade = score(model, x[shown], batch_size, exit=exit)[1] if exit else depth[shown]
        with guards.written(html) as f:
            f.write(html_page([docs[i] for i in shown], [tokens[i] for i in shown], shade,
                              get_tokenizer(load_meta(data_dir)['tokenizer'])[1],
                              f'{exit[0]} exit at {exit[1]}' if exit else source))
    print_report(report)
    print(f"wrote {path}" + (f" and {html}" if html else ''))

if __name__ == '__main__':
    exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'configurator.py')).read())
    device = guards.get_device(device)
    dirs = guards.folders(out_dir)  # several (a,b,c): each in turn (once), each its eval.json
    maps = {d: os.path.join(d, os.path.basename(html)) if html and dirs[1:] else html for d in dirs}
    checked = {d: load(d, maps[d]) for d in dirs}  # every model before any work
    exit_kind = exit_kind or 'maxprob'  # (checked as given)
    thresholds = thresholds or DEFAULTS[exit_kind]
    for d, (model, data_dir, T, (_, ctx, precision), report) in checked.items():
        print(precision, file=sys.stderr)  # stderr: stdout is the report
        with ctx:
            evaluate(report, model, data_dir, T, maps[d], precision)
