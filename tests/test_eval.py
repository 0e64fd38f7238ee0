"""eval.py: suffix NLL against a hand computation, depth scan and early-exit shapes, eval.json and the report end to end,
HTML escaping, one-line errors on bad input, and prepare -> train -> eval."""
import html, json, os, re
import numpy as np
import pytest
import torch
import torch.nn.functional as F
import eval as ev
from dataclasses import asdict as model_args
from model import GPT, GPTConfig
from harness import PATIENCE, REPO, run, start, told

def tiny(vocab=20, block=16, loops=(4,), **kw):
    torch.manual_seed(0)
    return GPT(GPTConfig(block_size=block, vocab_size=vocab, n_embd=16, n_head=2, n_prelude=1, loops=loops, n_coda=1, **kw)).eval()

def test_suffix_nll_matches_hand_computation():
    model, eot, T, start = tiny(), 19, 16, 12
    docs = [list(range(1, 26)),  # longer than the block: truncated, every position real, no EOT
            [3, 4, 5],           # shorter than the suffix start: its suffix is all pad
            list(range(2, 14)),  # 12 tokens: its EOT lands at position 12, the first suffix target
            [eot, 7]]            # an EOT id inside the text is still real: real is decided by position
    x, real = ev.pack_docs(docs, eot, T)
    assert x[0].tolist() == list(range(1, 17)) and x[1].tolist() == [3, 4, 5] + [eot] * 13
    nll, depth, resid, entropy = ev.score(model, x, 8)
    assert ev.suffix(T) == (start, slice(start - 1, None))  # 193 of 256 at T=16; target j: column j - 1
    assert ev.suffix(256) == (193, slice(192, None)) and ev.suffix(128)[0] == 96  # the paper's, scaled
    got = ev.suffix_nll(nll, real[:, 1:], ev.suffix(T)[1])
    with torch.no_grad():  # by hand: the logits at j - 1 predict token j; target j is real if j <= the doc's EOT index
        logits, _, info = model(x)
    logp = F.log_softmax(logits.float(), -1)
    assert torch.allclose(entropy, -(logp.exp() * logp).sum(-1)[:, :-1], atol=1e-5)  # the entropy probe, per position
    assert (resid > 0).all() and torch.allclose(resid, info['resid'][:, :-1])
    masked, unmasked = [], []
    for i, doc in enumerate(docs):
        for j in range(start, T):
            unmasked.append(-logp[i, j - 1, x[i, j]].item())
            if j <= len(doc):  # the appended EOT sits at index len(doc)
                masked.append(unmasked[-1])
    assert len(masked) == 4 + 0 + 1 + 0
    assert got['masked'] == pytest.approx(np.mean(masked), rel=1e-5)
    assert got['unmasked'] == pytest.approx(np.mean(unmasked), rel=1e-5)
    assert got['pad_fraction'] == pytest.approx(1 - len(masked) / len(unmasked))
    assert depth.shape == resid.shape == (4, T - 1) and (depth == 4).all()  # one column a prediction

def test_depth_scan_and_early_exit():
    model = tiny(loops=(4,))
    rows = torch.randint(0, 20, (6, 16), generator=torch.Generator().manual_seed(1))
    scan = ev.depth_scan(model, rows, 4)
    assert [s['k'] for s in scan] == [1, 2, 4, 8] and all(s['mean_depth'] == s['k'] for s in scan)
    curve = ev.early_exit_curve(model, rows, scan, 4, 'maxprob', ev.DEFAULTS['maxprob'])
    assert [c['threshold'] for c in curve] == list(ev.DEFAULTS['maxprob'])
    for c in curve:
        assert 1 <= c['mean_depth'] <= 4 and c['uniform_nll'] > 0
    assert [s['k'] for s in ev.depth_scan(tiny(loops=(3,)), rows, 4)] == [1, 2, 3, 6]
    assert [s['k'] for s in ev.depth_scan(tiny(loops=()), rows, 4)] == [0]  # a plain transformer: scored once
    assert ev.early_exit_curve(tiny(loops=(3,), act=True), rows, scan, 4, 'maxprob', (0.5,)) == []  # the ACT gate picks the depth itself

def test_early_exit_extremes():
    model, rows = tiny(loops=(3,)), torch.randint(0, 20, (4, 16), generator=torch.Generator().manual_seed(2))
    # threshold 0: every token exits after one step; 1.1: none exits
    lo, hi = ev.early_exit_curve(model, rows, ev.depth_scan(model, rows, 4), 4, 'maxprob', (0.0, 1.1))
    assert lo['mean_depth'] == 1 and lo['nll'] == pytest.approx(lo['uniform_nll'], rel=1e-5)  # exit at 1 == uniform k=1
    assert hi['mean_depth'] == 3 and hi['nll'] == pytest.approx(hi['uniform_nll'], rel=1e-5)  # no exit == uniform k=3

def make_run(root, vocab_size=257):
    """data/tiny/ as prepare.py writes it (byte tokens, EOT 256) and out/ckpt.pt as train.py writes it, by hand."""
    d = root / 'data' / 'tiny'
    d.mkdir(parents=True)
    ids = np.array(list(("def f(x):\n    return x * 2\n" * 20 + "the cat sat on the mat. " * 30).encode()) + [256], np.uint16)
    ids.tofile(d / 'train.bin'), ids.tofile(d / 'val.bin')
    (d / 'meta.json').write_text(json.dumps(dict(tokenizer='byte', vocab_size=vocab_size, eot=256, dtype='uint16')))
    lines = [json.dumps(dict(topic='code', text='def g(y):\n    return y + 1\n' * 3)),
             json.dumps(dict(topic='code', text='<script>alert(1)</script> & more')),
             '{"topic": "code", "text": ',  # truncated
             'not json at all',
             json.dumps(dict(topic='news', text='Stocks rose \u00a35 on Monday as markets ' * 4)),
             json.dumps(dict(topic='chat', text='hi'))]  # mostly pad in the suffix
    (d / 'eval.jsonl').write_text('\n'.join(lines) + '\n')
    cfg = GPTConfig(block_size=32, vocab_size=257, n_embd=16, n_head=2, n_prelude=1, loops=(2,), n_coda=1)
    torch.manual_seed(0)
    (root / 'out').mkdir()
    torch.save(dict(model=GPT(cfg).state_dict(), model_args=model_args(cfg), iter_num=0,
                    meta=dict(tokenizer='byte', vocab_size=257, eot=256, dtype='uint16'),
                    config=dict(dataset='tiny', block_size=32, device='cpu')), root / 'out' / 'ckpt.pt')

def start_eval(cwd, *args):
    return start(cwd, 'eval.py', '--out_dir=out', '--eval_iters=2', '--batch_size=4', *args)

def finish(p):
    out, err = p.communicate(timeout=PATIENCE)
    return p.returncode, out, err

@pytest.mark.slow
def test_eval_json_report_and_html(tmp_path):
    make_run(tmp_path)
    rc, out, err = finish(start_eval(tmp_path, '--html=maps/new/depth.html'))  # folders it makes
    assert rc == 0, err
    r = json.loads((tmp_path / 'out' / 'eval.json').read_text())
    assert {'suffix_nll', 'depth_scan', 'early_exit', 'topics', 'residual_probe_r', 'alphas'} <= set(r)
    assert set(r['suffix_nll']) == {'masked', 'unmasked', 'pad_fraction'} and 0 < r['suffix_nll']['pad_fraction'] < 1
    assert [s['k'] for s in r['depth_scan']] == [1, 2, 4] and all({'k', 'nll'} <= set(s) for s in r['depth_scan'])
    assert r['early_exit'] and all({'threshold', 'mean_depth', 'nll', 'uniform_nll'} <= set(c) for c in r['early_exit'])
    assert set(r['topics']) == {'code', 'news', 'chat'}
    assert all({'nll', 'mean_depth', 'tokens'} <= set(t) for t in r['topics'].values())
    # a fixed-depth model: every prediction runs the trained 2 iterations, and k in the scan
    assert all(t['mean_depth'] == 2.0 for t in r['topics'].values()), r['topics']
    assert all(s['mean_depth'] == s['k'] for s in r['depth_scan']), r['depth_scan']
    exits = sorted(r['early_exit'], key=lambda c: c['threshold'])  # a higher threshold stops fewer tokens early
    assert all(1 <= a['mean_depth'] <= b['mean_depth'] <= 2 for a, b in zip(exits, exits[1:])), exits
    assert r['topics']['chat']['tokens'] == 2  # 'h' -> 'i', 'i' -> EOT
    assert isinstance(r['residual_probe_r'], float) and len(r['alphas']) == 1 and r['skipped_lines'] == 2
    assert set(r['probes']) == {'relative residual', 'entropy'}
    assert r['probes']['relative residual'] == r['residual_probe_r'] and all(-1 <= v <= 1 for v in r['probes'].values())
    for needle in ('suffix NLL', 'masked', 'depth scan', 'early exit', 'topics', 'probes of NLL', 'alphas',
                   'measures padding', 'skipped 2 malformed lines', 'wrote out/eval.json'):
        assert needle in out, needle
    page = (tmp_path / 'maps' / 'new' / 'depth.html').read_text()
    assert '<script' not in page.lower() and '&lt;' in page and '&amp;' in page
    assert '<script>alert(1)</script> & more' in html.unescape(re.sub(r'<[^>]+>', '', page))  # shown as text
    assert '<svg' not in page and re.search(r'Colour: maxprob exit at 0\.\d+', page)  # the token colouring
    assert 'Stocks rose \u00a35' in html.unescape(re.sub(r'<[^>]+>', '', page))  # '£' as itself,
    assert '\ufffd' not in html.unescape(re.sub(r'<[^>]+>', '', page))  # not as two replacement marks

def test_depth_map_paints_a_character_of_several_tokens_whole(tmp_path):
    """'£' is 2 byte tokens: one span, shown as itself, coloured by the larger depth of its two tokens, under the
    line naming what the colour is."""
    encode, decode, _ = ev.get_tokenizer('byte')
    tokens = [encode('costs \u00a35')]  # 9 tokens: 7 predictions shown, 'o' to the 2 of '£'
    depth = torch.tensor([[1, 1, 1, 1, 1, 2, 3]])  # (N, T - 1): the two of '£' ran 2 and 3
    page = ev.html_page([dict(topic='news')], tokens, depth, decode, 'the ACT gate')
    assert 'Colour: the ACT gate' in page
    colour = lambda text: re.findall(r'<span style="background:([^"]*)">' + re.escape(text) + '<', page)
    assert colour('\u00a3') == ['hsl(0,85%,82%)'] and '\ufffd' not in page  # one span, depth 3 of 3: red
    assert colour(' ') == ['hsl(147,85%,82%)']  # depth 1 of 3

GPT2_META = dict(tokenizer='gpt2', vocab_size=50257, eot=50256, dtype='uint16')


def test_bad_input_is_one_line(tmp_path):
    cases = {'vocab': ([], 'meta.json: tokenizer gpt2, vocab_size 50257, but the model was trained on'),
             'ckpt': (['--out_dir=nope'], 'no checkpoint at nope/ckpt.pt')}
    procs = {}
    for name, (args, _) in cases.items():
        (tmp_path / name).mkdir()
        make_run(tmp_path / name)
        if name == 'vocab':  # the data re-prepared with the other tokenizer
            (tmp_path / name / 'data' / 'tiny' / 'meta.json').write_text(json.dumps(GPT2_META))
        procs[name] = start_eval(tmp_path / name, *args)
    for name, p in procs.items():
        rc, out, err = finish(p)
        assert rc != 0 and told(err)[0].startswith('error:') and 'Traceback' not in err, err
        assert cases[name][1] in err and len(told(err)) == 1, err

@pytest.mark.slow
def test_prepare_train_eval(tmp_path):
    """prepare.py (byte, from a local mirror) -> train.py config/smoke.py, shrunk -> eval.py."""
    src = tmp_path / 'mirror' / 'raw.githubusercontent.com' / 'karpathy/char-rnn/master/data/tinyshakespeare/input.txt'
    src.parent.mkdir(parents=True)
    src.write_text(''.join(f"CITIZEN {i}:\nWe are accounted poor citizens, the patricians good {i}.\n\n" for i in range(80)))
    p = run(tmp_path, 'prepare.py', '--dataset=shakespeare', '--tokenizer=byte', '--mirror=mirror', '--eval_docs=6')
    assert p.returncode == 0, p.stderr
    p = run(tmp_path, 'train.py', REPO / 'config' / 'smoke.py', '--out_dir=out', '--max_iters=20', '--eval_interval=20',
            '--eval_iters=2', '--n_embd=32', '--block_size=32', '--batch_size=4', '--device=cpu')
    assert p.returncode == 0, p.stderr
    rc, out, err = finish(start_eval(tmp_path))
    assert rc == 0, err
    r = json.loads((tmp_path / 'out' / 'eval.json').read_text())
    assert list(r['topics']) == ['shakespeare'] and r['topics']['shakespeare']['tokens'] > 0
    assert [s['k'] for s in r['depth_scan']] == [1, 2, 4, 8] and r['suffix_nll']['masked'] is not None
