"""The second stage: SFT rows (prepare.py --dataset=sft), the loss mask, fine-tuning from a trained out_dir (and resuming
it exactly), and several models in one eval run and one sample run."""
import json, os, re

import numpy as np
import pytest
import torch

from harness import (ENV, REPO, TINY, copy_run, load, losses, make_data, ok, one_line_error, run,  # noqa: F401
                     trained_run, work, jobs, job)
import guards
import prepare
from test_prepare import sources  # noqa: F401  (the fixture: every topic source, in its real format)

EOT = 256
ROW = 33  # tokens a row: the TINY models' block_size (32) + 1


# ---------------------------------------------------------------- the loss mask
def test_sft_targets_mask_the_prompt_and_optionally_the_pad():
    rows = torch.tensor([[1, 2, 3, EOT, 4, 5, EOT, EOT, EOT],
                         [EOT, 7, EOT, EOT, EOT, EOT, EOT, EOT, EOT]])  # an empty prompt
    # targets are rows[:, 1:]; -1 is ignored by the loss
    assert prepare.sft_targets(rows, EOT).tolist() == [[-1, -1, -1, 4, 5, EOT, EOT, EOT],
                                                       [7, EOT, EOT, EOT, EOT, EOT, EOT, EOT]]
    assert prepare.sft_targets(rows, EOT, pad=False).tolist() == [[-1, -1, -1, 4, 5, EOT, -1, -1],
                                                                  [7, EOT, -1, -1, -1, -1, -1, -1]]


def test_masked_targets_do_not_reach_the_loss():
    """The loss on a row is the mean over the targets the mask keeps, and only over them."""
    from model import GPT, GPTConfig
    torch.manual_seed(0)
    m = GPT(GPTConfig(block_size=16, vocab_size=257, n_embd=16, n_head=2, n_prelude=1, loops=(2,), n_coda=1))
    a = torch.tensor([[10, 11, 12, EOT, 20, 21, EOT, EOT, EOT]])
    la = m(a[:, :-1], prepare.sft_targets(a, EOT))[1]
    logits = m(a[:, :-1])[0]
    y = prepare.sft_targets(a, EOT)[0]
    keep = y >= 0
    by_hand = torch.nn.functional.cross_entropy(logits[0][keep], y[keep])
    assert torch.allclose(la, by_hand)
    assert keep.tolist() == [False, False, False, True, True, True, True, True]
    no_pad = prepare.sft_targets(a, EOT, pad=False)[0]
    assert (no_pad >= 0).tolist() == [False, False, False, True, True, True, False, False]


# ---------------------------------------------------------------- the rows prepare.py writes
def test_prepare_sft_rows(sources, tmp_path, monkeypatch):
    root = tmp_path / 'data'
    r = run(REPO, 'prepare.py', '--dataset=sft', '--tokenizer=byte', f'--mirror={sources}', f'--data_root={root}',
            '--block_size=56', '--eval_docs=1')
    out = ok(r)
    meta = prepare.load_meta(str(root / 'sft_byte'))
    assert meta['row'] == 56
    rows = np.fromfile(root / 'sft_byte' / 'train.bin', np.uint16).reshape(-1, 56)
    held, _ = prepare.read_eval_docs(str(root / 'sft_byte' / 'eval.jsonl'))
    samples = {(d['text'], d['answer']) for d in held}
    monkeypatch.setattr(prepare, 'mirror', sources)
    pairs = {*prepare.code_pairs(), *prepare.math_pairs(), *prepare.dialogue_pairs()}
    assert ('Write function f1.\nn = 3', 'def f1():\n    return 1') in pairs  # task + input -> answer
    assert ('Hello train 0, how are you?', "I don't know, it\u2019s late!") in pairs  # a turn -> the next
    dropped = int(re.search(r'dropped (\d+) of \d+ samples', out).group(1))
    val = np.fromfile(root / 'sft_byte' / 'val.bin', np.uint16).reshape(-1, 56)
    for row in np.concatenate([rows, val]):
        eots = np.flatnonzero(row == EOT)
        sep, end = eots[0], eots[1]
        assert (row[end:] == EOT).all()  # the answer's EOT, then nothing but padding
        prompt, answer = bytes(row[:sep].tolist()).decode(), bytes(row[sep + 1:end].tolist()).decode()
        assert (prompt, answer) in pairs and (prompt, answer) not in samples  # a training pair, never held out
        kept = prepare.sft_targets(torch.tensor(row[None].astype(np.int64)), EOT, pad=False)[0]
        assert bytes(kept[kept >= 0][:-1].tolist()).decode() == answer and kept[kept >= 0][-1] == EOT  # the mask: answer + EOT
        assert (prepare.sft_targets(torch.tensor(row[None].astype(np.int64)), EOT)[0][end:] == EOT).all()  # + the pad
    assert len(rows) + len(val) + dropped == len(pairs) - 3  # 3 held out: one a topic
    assert dropped > 0 and len(val) >= 1
    assert all(d['topic'] in ('code', 'math', 'dialogue') for d in held)
    assert all(len(p.encode()) + len(a.encode()) + 2 <= 48 for p, a in samples)  # every held-out sample fits


def test_held_out_sft_samples_share_no_content_with_sft_rows_or_pre_training(sources, tmp_path):
    """The SFT samples held out come from the documents topics holds out, so the PT model never
    read them; a sample whose prompt or answer a kept one has (a repeated turn) is dropped."""
    root = tmp_path / 'data'
    for name in ('topics', 'sft'):
        ok(run(REPO, 'prepare.py', f'--dataset={name}', '--tokenizer=byte', f'--mirror={sources}',
               f'--data_root={root}', '--block_size=64', '--eval_docs=2'))
    held, _ = prepare.read_eval_docs(str(root / 'sft_byte' / 'eval.jsonl'))
    assert {d['topic'] for d in held} == {'code', 'math'}  # both held-out dialogues repeat a turn
    text = lambda ids: bytes(ids[ids != EOT].tolist()).decode()
    pre_training = ''.join(text(np.fromfile(root / 'topics_byte' / f, np.uint16)) for f in ('train.bin', 'val.bin'))
    rows = np.concatenate([np.fromfile(root / 'sft_byte' / f, np.uint16).reshape(-1, 64) for f in ('train.bin', 'val.bin')])
    kept = set()
    for row in rows:
        sep, end = np.flatnonzero(row == EOT)[:2]
        kept |= {text(row[:sep]), text(row[sep + 1:end])}
    for d in held:
        assert d['text'] not in kept and d['answer'] not in kept
        assert d['text'] not in pre_training and d['answer'] not in pre_training
    topics_held, _ = prepare.read_eval_docs(str(root / 'topics_byte' / 'eval.jsonl'))
    assert all(d['text'] + '\n' + d['answer'] in {t['text'] for t in topics_held} for d in held)


# ---------------------------------------------------------------- fine-tuning from a trained run
def make_sft(root, n=60):
    """data/sft/ in prepare.py's SFT format: rows of ROW tokens (prompt, EOT, answer, EOT, padding)."""
    rng = np.random.default_rng(0)
    rows = np.full((n, ROW), EOT, np.uint16)
    for row in rows:
        p, a = rng.integers(97, 123, rng.integers(3, 10)), rng.integers(48, 58, rng.integers(2, 8))
        row[:len(p)], row[len(p) + 1:len(p) + 1 + len(a)] = p, a
    d = root / 'data' / 'sft'
    d.mkdir(parents=True)
    rows[:50].tofile(d / 'train.bin')
    rows[50:].tofile(d / 'val.bin')
    (d / 'meta.json').write_text(json.dumps({'tokenizer': 'byte', 'vocab_size': 257, 'eot': EOT, 'dtype': 'uint16', 'row': ROW}))
    samples = [('hi', 'yo'), ('how are you today', 'fine thanks')] * 2  # the short ones: all pad in the suffix
    (d / 'eval.jsonl').write_text(''.join(json.dumps({'topic': 'chat', 'text': p, 'answer': a}) + '\n' for p, a in samples))


SFT = ['--init_from=pt', '--dataset=sft', '--device=cpu', '--batch_size=4', '--eval_iters=2', '--log_interval=1',
       '--warmup_iters=2', '--lr_decay_iters=100', '--learning_rate=0.003']


@work
def fine_tune_from_an_out_dir(d):
    make_data(d)
    make_sft(d)
    ok(run(d, 'train.py', *TINY, '--out_dir=pt', '--max_iters=6', '--eval_interval=6', '--n_embd=48'))
    straight = run(d, 'train.py', *SFT, '--out_dir=ft', '--max_iters=6', '--eval_interval=6')
    ok(run(d, 'train.py', *SFT, '--out_dir=split', '--max_iters=3', '--eval_interval=3'))
    second = run(d, 'train.py', *SFT, '--out_dir=split', '--max_iters=6', '--eval_interval=6', '--init_from=resume')
    nopad = run(d, 'train.py', *SFT, '--out_dir=nopad', '--max_iters=1', '--eval_interval=1', '--sft_pad=False')
    missing = run(d, 'train.py', *SFT, '--out_dir=x', '--init_from=nope')
    make_data(d, 'words_gpt2')
    meta = d / 'data' / 'words_gpt2' / 'meta.json'
    meta.write_text(meta.read_text().replace('"byte"', '"gpt2"').replace('257', '50257').replace('256', '50256'))
    other = run(d, 'train.py', *SFT, '--out_dir=y', '--dataset=words_gpt2')
    return (straight, second, nopad, missing, other, load(d / 'pt' / 'ckpt.pt'), load(d / 'ft' / 'ckpt.pt'),
            load(d / 'split' / 'ckpt.pt'))


def test_fine_tune_from_an_out_dir(job):
    straight, second, nopad, missing, other, pt, ft, split = job
    out = ok(straight)
    assert 'fine-tuning pt/ckpt.pt (trained 6 iters) from iter 0' in out
    assert ft['model_args'] == pt['model_args'] and ft['model_args']['n_embd'] == 48  # the architecture of the run
    assert ft['config']['n_embd'] == 48 and ft['config']['block_size'] == ROW - 1 and ft['config']['sft_pad']
    assert ft['iter_num'] == 6 and sorted(losses(out)) == [1, 2, 3, 4, 5, 6]
    steps = {s['step'].item() for s in ft['optimizer']['state'].values()}
    assert steps == {6.0}  # a fresh optimizer: the pre-training's 6 steps are not in it
    assert not torch.equal(ft['model']['wte.weight'], pt['model']['wte.weight'])
    a, b = losses(out), losses(ok(second))
    assert sorted(b) == [4, 5, 6] and all(a[i] == b[i] for i in (4, 5, 6)), (a, b)  # a fine-tune resumes exactly
    assert split['config']['dataset'] == 'sft'
    assert losses(ok(nopad))[1] != a[1]  # the pad targets were in the loss, and now are not
    one_line_error(missing, 'no checkpoint at nope/ckpt.pt')
    one_line_error(other, 'tokenizer gpt2', 'byte', "the model's tokenizer")


# ---------------------------------------------------------------- several models: one eval run, one sample run
@work
def several_models_side_by_side(d):
    copy_run(trained_run(d), d, out='pt')
    make_sft(d)
    ok(run(d, 'train.py', *SFT, '--out_dir=ft', '--max_iters=30', '--eval_interval=30'))
    reports = lambda pt: [json.loads((d / m).read_text()) for m in (f'pt/{pt}', 'ft/eval.json')]
    ev = run(d, 'eval.py', '--out_dir=pt,ft', '--dataset=sft', '--device=cpu', '--eval_iters=1', '--batch_size=4')
    on_sft = reports('eval_sft.json') if ev.returncode == 0 else None
    own = run(d, 'eval.py', '--out_dir=pt,ft,pt', '--device=cpu', '--eval_iters=1', '--batch_size=4')
    sample = run(d, 'sample.py', '--out_dir=pt,ft,pt', '--start=ab', '--max_new_tokens=8', '--num_samples=2',
                 '--device=cpu')
    return ev, own, sample, on_sft, reports('eval.json') if own.returncode == 0 else None


def test_several_models_side_by_side(job):
    """eval.py --out_dir=a,b evaluates each in turn (on the same documents with --dataset), each its own
    eval.json and report (a,b,a: each once); sample.py --out_dir=a,b,a: each under its name, the same seed and
    settings."""
    ev, own, sample, on_sft, on_own = job
    out = ok(ev)
    # pt's report on other data than its own is eval_sft.json: its eval.json (its own data) is kept
    assert out.count('suffix NLL (') == 2 and out.index('wrote pt/eval_sft.json') < out.index('wrote ft/eval.json')
    for r in on_sft:
        assert r['docs'] == 'data/sft/eval.jsonl' and r['suffix_nll']['pad_fraction'] > 0.5  # the SFT samples: mostly pad
    assert on_sft[0]['suffix_nll'] != on_sft[1]['suffix_nll']  # two models, two reports
    assert 'models, ranked' not in out  # no ranking table: frontier.py ranks across seeds
    assert ok(own).count('suffix NLL (') == 2  # pt named twice: evaluated once
    assert [r['docs'] for r in on_own] == ['data/tiny/eval.jsonl', 'data/sft/eval.jsonl']  # each its own
    text = ok(sample)
    parts = re.split(r'^=== (\S+) ===$', text, flags=re.M)
    assert parts[1::2] == ['pt', 'ft', 'pt']
    assert parts[2] == parts[6] and parts[2] != parts[4]  # the same seed and settings: only the model differs
    assert all(p.count('---------------') == 2 for p in parts[2::2])
