"""lab/frontier.py, the seeded campaign: FLOPs against torch's FlopCounterMode, the selection exit, the
oracle, the monotone envelope and the verdict rule on hand-made cases; a run that stopped early;
and the whole command on tiny models, whose rerun trains nothing and writes the same tables."""
import json, os, re, runpy, shutil, subprocess, sys

import numpy as np
import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from harness import PATIENCE, REPO, SERVER, make_data, run, told
from lab import frontier
from model import GPT, GPTConfig


def counted(model, idx, **kw):
    """The forward FLOPs per token that torch counts. (Attention by the math backend, two matmuls:
    FlopCounterMode has no formula for the CPU's fused kernel, and counts it as 0.)"""
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as f:
        model(idx, **kw)
    return f.get_total_flops() / idx.numel()


@pytest.mark.parametrize('shape', [dict(n_prelude=2, loops=(5,), n_coda=2),
                                   dict(n_prelude=1, loops=(2, 3), n_coda=1)])
def test_flops_per_token_match_flop_counter_mode(shape):
    torch.manual_seed(0)
    c = GPTConfig(block_size=16, vocab_size=57, n_embd=32, n_head=4, **shape)
    model, K = GPT(c).eval(), sum(c.loops)
    idx = torch.randint(0, 57, (2, 16))
    assert counted(model, idx) == frontier.flops(c, 16, K)  # every block, one readout
    assert counted(model, idx, n_loops=1) == frontier.flops(c, 16, len(c.loops))
    # a maxprob exit that never fires: every iteration runs its check (a readout) and continues
    assert counted(model, idx, exit=('maxprob', 2.0)) == frontier.flops(c, 16, K, readouts=K + 1)
    assert counted(model, idx, exit=('resid', 0.0)) == frontier.flops(c, 16, K)  # no matmul


def test_act_and_exit_gate_flops_count_their_gates():
    torch.manual_seed(0)
    c = GPTConfig(block_size=16, vocab_size=57, n_embd=32, n_head=4, loops=(4,), act=True)
    idx = torch.randint(0, 57, (2, 16))
    # a fresh gate halts no token before the last step (h = 0.047 a step): a gate at each step
    assert counted(GPT(c).eval(), idx) == frontier.flops(c, 16, 4, readouts=1, gates=4)
    c = GPTConfig(block_size=16, vocab_size=57, n_embd=32, n_head=4, loops=(4,), supervise=(1, 2),
                  exit_gate=True)
    # the exit gate shapes training only: evaluated, a model with one runs no gate
    assert counted(GPT(c).eval(), idx) == frontier.flops(c, 16, 4)


def test_training_flops_count_the_supervised_readouts_and_phantoms_forward_only_steps():
    c = GPTConfig(block_size=16, vocab_size=57, n_embd=32, n_head=4, loops=(6,))
    block = frontier.block_flops(c, 16)
    readout = frontier.flops(c, 16, 0) - c.n_prelude * block
    multi = GPTConfig(**{**vars(c), 'supervise': (1, 2, 6)})
    assert frontier.train_flops(multi, 16) - frontier.train_flops(c, 16) == 3 * 2 * readout
    phantom = GPTConfig(**{**vars(c), 'phantom': True, 'phantom_steps': 1})
    assert frontier.train_flops(c, 16) - frontier.train_flops(phantom, 16) == 2 * 5 * block


def test_selection_picks_each_tokens_first_confident_depth():
    nll = torch.tensor([[3.0, 2.0, 1.0, 4.0],    # depth 1
                        [2.5, 1.5, 0.5, 3.0],    # depth 2
                        [2.0, 1.0, 0.2, 2.0]])   # depth 3
    confident = torch.tensor([[False, True, False, False],
                              [True, True, False, False],
                              [True, False, True, False]])  # token 3: never confident -> the last depth
    chosen, depth = frontier.select(nll, confident)
    assert depth.tolist() == [2, 1, 3, 3]  # the FIRST confident depth, even if a later one is not
    assert torch.allclose(chosen, torch.tensor([2.5, 2.0, 0.2, 2.0]))


def test_oracle_sees_the_target_and_pays_for_compute(monkeypatch):
    nll = torch.tensor([[3.0, 1.0],   # depth 1
                        [1.0, 0.9]])  # depth 2
    monkeypatch.setattr(frontier, 'LAMBDAS', (0, 1.5, 100))
    free, priced, dear = frontier.oracle(nll, [1e6, 2e6])  # 1 and 2 MFLOP a token
    assert free['nll'] == pytest.approx(0.95) and free['depth'] == 2  # each token its best depth
    # at 1.5 nats per MFLOP, token 1 still pays for depth 2 (it gains 2 nats), token 2 does not
    assert priced['nll'] == pytest.approx(1.0) and priced['depth'] == 1.5
    assert priced['flops'] == pytest.approx(1.5e6)
    assert dear['depth'] == 1 and dear['nll'] == pytest.approx(2.0)


def test_envelope_is_monotone_in_compute():
    run = {'val': {'fixed': [dict(flops=1.0, nll=2.0), dict(flops=2.0, nll=1.5),
                             dict(flops=3.0, nll=1.8)]}}  # deeper got worse: the envelope keeps 1.5
    env = frontier.envelope(run)
    assert env(2.5) == 1.5 and env(3.0) == 1.5 and env(1.5) == pytest.approx(1.75)


def test_verdict_needs_three_seeds_and_t_standard_errors():
    """A finding: |mean| beyond t(0.975, n-1) standard errors (4.30 at 3 seeds, 2.78 at 5), not
    twice; 2 seeds give no verdict at all."""
    def diffs(ratio, n):  # n differences whose mean is `ratio` standard errors
        spread = np.linspace(-1, 1, n)
        se = spread.std(ddof=1) / np.sqrt(n)
        return list(ratio * se + spread)
    assert frontier.verdict(diffs(4.4, 3)).startswith('**finding**')
    assert frontier.verdict(diffs(4.2, 3)).startswith('not established (+4.2 SE)')
    assert frontier.verdict(diffs(3.0, 3)).startswith('not established')  # (2 SE: was a finding)
    assert frontier.verdict(diffs(-2.9, 5)).startswith('**finding** (-2.9 SE)')
    assert frontier.verdict(diffs(2.7, 5)).startswith('not established')
    assert frontier.verdict(diffs(2.3, 12)).startswith('**finding**')  # (past 10: t(9)'s 2.26)
    assert frontier.verdict([0.10, 0.11]) == 'no verdict (2 seeds)'
    assert frontier.verdict([0.10]) == 'no verdict (1 seed)'


def make_sft_data(root):
    """data/sft_byte/ as prepare.py writes it: rows of 33 tokens, and held-out samples."""
    d = root / 'data' / 'sft_byte'
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    rows = np.full((40, 33), 256, np.uint16)
    for row in rows:
        p, a = rng.integers(97, 123, rng.integers(3, 10)), rng.integers(48, 58, rng.integers(2, 8))
        row[:len(p)], row[len(p) + 1:len(p) + 1 + len(a)] = p, a
    rows[:32].tofile(d / 'train.bin')
    rows[32:].tofile(d / 'val.bin')
    meta = {'tokenizer': 'byte', 'vocab_size': 257, 'eot': 256, 'dtype': 'uint16', 'row': 33}
    (d / 'meta.json').write_text(json.dumps(meta))
    samples = [('hi there', 'yo 42'), ('how are you today', 'fine thanks')]
    (d / 'eval.jsonl').write_text(''.join(json.dumps({'topic': 'dialogue', 'text': p, 'answer': a})
                                          + '\n' for p, a in samples))


def frontier_py(tmp_path, *args, monkeypatch, capsys):
    """`python lab/frontier.py args` in tmp_path, its main block run here; each train.py it starts (with
    subprocess.run, which inherits the environment) runs in a process forked from harness.SERVER, as it
    would in a python of its own -> frontier.py's stdout."""
    def train_py(cmd, stdout, stderr):
        assert cmd[0] == sys.executable and cmd[1].endswith('train.py'), cmd
        p = SERVER.start(cmd[1:], os.getcwd(), dict(os.environ), stdout=stdout, stderr=stderr)
        return subprocess.CompletedProcess(cmd, p.wait(timeout=PATIENCE))
    with monkeypatch.context() as m:
        m.chdir(tmp_path)
        m.setattr(sys, 'argv', ['lab/frontier.py', *args])
        m.setattr(sys, 'excepthook', sys.excepthook)  # configurator.py sets its own: undo it
        m.setattr(subprocess, 'run', train_py)
        runpy.run_path(str(REPO / 'lab' / 'frontier.py'), run_name='__main__')
    return capsys.readouterr().out


@pytest.mark.slow
def test_campaign_on_tiny_models(tmp_path, monkeypatch, capsys):
    make_data(tmp_path, 'topics_byte')
    make_sft_data(tmp_path)
    quick = ('--max_iters=2 --eval_interval=2 --n_embd=16 --block_size=32 --batch_size=2 '
             '--eval_iters=1 --device=cpu --warmup_iters=1 --lr_decay_iters=2')
    args = ['--models=single,multi,act-0.003,exit-0.1,plain,sft,sft-nopad,plain-sft',
            '--seeds=(1,2)', f'--train_args={quick}', '--eval_iters=1', '--batch_size=4']
    out = frontier_py(tmp_path, *args, monkeypatch=monkeypatch, capsys=capsys)
    assert out.count('training out-frontier/runs/') == 16  # each model, at each seed, once
    assert not (tmp_path / 'lab' / 'seeds').exists()  # lab/seeds/ is written only when asked
    runs = tmp_path / 'out-frontier' / 'runs'
    single = json.loads((runs / 'single-s2.json').read_text())
    assert single['seed'] == 2 and [p['t'] for p in single['val']['fixed']] == list(range(1, 13))
    assert {'frozen maxprob', 'selection resid', 'oracle'} <= set(single['val'])
    exit_gate = json.loads((runs / 'exit-0.1-s1.json').read_text())['val']
    assert set(exit_gate) == set(single['val'])  # its exits: the post-hoc ones, as single's
    assert set(json.loads((runs / 'act-0.003-s1.json').read_text())['val']) == {'ACT'}
    sft = json.loads((runs / 'sft-s1.json').read_text())['sft']
    assert sft['answer_tokens'] == 5 + 1 + 11 + 1  # both answers, each with its EOT
    s1 = torch.load(tmp_path / 'out-frontier/runs/single-s1/ckpt.pt', weights_only=True)
    s2 = torch.load(tmp_path / 'out-frontier/runs/single-s2/ckpt.pt', weights_only=True)
    assert s1['config']['seed'] == 1 and not torch.equal(s1['model']['wte.weight'],
                                                         s2['model']['wte.weight'])
    findings = (tmp_path / 'out-frontier' / 'findings.md').read_text()
    assert '## 1-2. The trade-off law' in findings and 'no verdict (2 seeds)' in findings
    assert '## 8. SFT on held-out samples' in findings
    svg = (tmp_path / 'out-frontier' / 'frontier.svg').read_text()
    assert svg.startswith('<svg xmlns="http://www.w3.org/2000/svg"') and svg.count('<polyline') >= 8
    again = frontier_py(tmp_path, *args, monkeypatch=monkeypatch, capsys=capsys)
    assert 'training' not in again and 'measured' not in again  # read from the files
    assert (tmp_path / 'out-frontier' / 'findings.md').read_text() == findings


@pytest.fixture
def trainer(tmp_path, monkeypatch):
    """frontier.train with train.py replaced: a stand-in records its arguments, exits with `rc`."""
    calls, rc = [], [0]
    monkeypatch.setattr(frontier, 'results', str(tmp_path))
    monkeypatch.setattr(frontier, 'runs', str(tmp_path / 'runs'))
    def train_py(args, **kw):
        calls.append(args)
        return subprocess.CompletedProcess(args, rc[0])
    monkeypatch.setattr(frontier.subprocess, 'run', train_py)
    return calls, rc


def save_run(out_dir, iter_num, max_iters):  # the keys of a checkpoint that frontier.train reads
    out_dir.mkdir(parents=True)
    torch.save(dict(iter_num=iter_num, config=dict(max_iters=max_iters)), out_dir / 'ckpt.pt')


def test_a_run_that_stopped_early_is_resumed_not_measured(trainer, tmp_path, capsys):
    calls, _ = trainer
    save_run(tmp_path / 'runs' / 'single-s1', 750, 750)  # finished: measured as it is
    save_run(tmp_path / 'runs' / 'sft-s1', 51, 600)  # Ctrl-C at iter 51 of 600
    frontier.train('sft', 1)
    assert len(calls) == 1 and calls[0][-1] == '--init_from=resume'
    assert not any('--init_from=' in a and 'resume' not in a for a in calls[0])  # not fine-tuned anew
    assert f"resuming {tmp_path / 'runs' / 'sft-s1'} (it stopped at iter 51 of 600)" in capsys.readouterr().out
    frontier.train('single', 1)
    assert len(calls) == 1
    frontier.train('sft', 2)  # its own seed's PT run first, then the fine-tuning from it
    assert '--seed=2' in calls[1] and calls[1][-1].endswith('single-s2')
    assert f"--init_from={tmp_path / 'runs' / 'single-s2'}" in calls[2]


def test_a_failed_training_is_one_line(trainer, tmp_path):
    calls, rc = trainer
    rc[0] = 130  # stopped with Ctrl-C
    with pytest.raises(ValueError, match=r'training .*multi-s3 failed \(exit 130\): see .*multi-s3\.log'):
        frontier.train('multi', 3)


def test_unknown_model_is_a_one_line_error(tmp_path):
    r = run(tmp_path, 'lab/frontier.py', '--models=single,nope')
    assert r.returncode == 1 and 'models' in r.stderr and len(told(r.stderr)) == 1


def test_the_default_models_are_the_ones_results_seeds_holds():
    """So `python lab/frontier.py --results=lab/seeds` on a fresh clone trains nothing (a model
    whose option left the code keeps its runs for the page only)."""
    held = {p.name.rsplit('-s', 1)[0] for p in (REPO / 'lab/seeds/runs').glob('*.json')}
    assert held & set(frontier.MODELS) == set(frontier.STUDY)


def test_committed_findings_are_what_the_runs_files_give(monkeypatch):
    """Each committed campaign's findings.md (lab/seeds, depth, ...) is frontier.findings of its
    runs/*.json: a rerun of the command that wrote it (which reads them) writes the same page."""
    pages = sorted((REPO / 'lab').glob('*/findings.md'))
    for page in pages:
        monkeypatch.setattr(frontier, 'results', str(page.parent.relative_to(REPO)))
        assert frontier.findings(frontier.read_runs(page.parent)) == page.read_text(), page
    assert len(pages) >= 4


def test_a_model_whose_code_left_keeps_its_place_on_its_page(tmp_path, monkeypatch):
    """A model that ran but is no longer in MODELS (its training code left) is shown where the page
    being rewritten shows it, and only in the tables that show it; on a new page, after the others,
    by name. (The committed pages hold such models: lab/depth's probe, embed, inject.)"""
    runs = {n: {1: {}} for n in ('single', 'multi', 'warmup', 'zeta', 'alpha', 'multi+w100')}
    monkeypatch.setattr(frontier, 'results', str(tmp_path))
    shown = lambda names, heading: frontier.shown(runs, names, heading)
    assert shown(frontier.FIXED_MODELS, '## 1-2.') == ['single', 'multi', 'warmup', 'alpha', 'zeta']
    (tmp_path / 'findings.md').write_text(
        '# The seeded findings\n\n## 1-2. The trade-off law\n\n| model | k=1 |\n| --- | --- |\n'
        '| single | 2 |\n| zeta | 2 |\n| multi | 2 |\n| warmup | 2 |\n| alpha | 2 |\n\n'
        '## 4. Phantom gradient\n\n| model | val NLL |\n| --- | --- |\n| single | 2 |\n')
    assert shown(frontier.FIXED_MODELS, '## 1-2.') == ['single', 'zeta', 'multi', 'warmup', 'alpha']
    assert shown(frontier.PT_MODELS, '## 4.') == ['single', 'multi', 'warmup']
    assert shown(frontier.DEPTH_MODELS, '## 10.') == ['warmup', 'alpha', 'zeta']  # (no such table)


def test_from_runs_rewrites_a_page_from_its_runs_and_trains_nothing(tmp_path):
    """--from_runs=True: the page of a folder's runs/*.json as they are, without data or runs."""
    shutil.copytree(REPO / 'lab' / 'gate' / 'runs', tmp_path / 'gate' / 'runs')
    r = subprocess.run([sys.executable, str(REPO / 'lab' / 'frontier.py'), '--results=gate',
                        '--from_runs=True', '--runs=nowhere'], cwd=tmp_path, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert 'training' not in r.stdout and not (tmp_path / 'nowhere').exists()
    page = (tmp_path / 'gate' / 'findings.md').read_text()
    assert page == (REPO / 'lab' / 'gate' / 'findings.md').read_text().replace(
        'lab/gate', 'gate')


# ---------------------------------------------------------------- the numbers the docs quote
# Each 'mean ± SE' that RESULTS.md or README.md quotes must be on the page its sentence cites, in a
# line that names no model or depth the sentence does not; each percentage must be a ratio of two
# numbers the sentence quotes, or be on that page. The page a sentence cites: a lab/<campaign>
# its paragraph names, else the last one named before it in its section, else (a list item, a
# table row) the one its lead paragraph names. A campaign's pages: its .md and .txt files.
MODELS = sorted(['single', 'multi', 'plain', 'phantom', 'sandwich3', 'exit-0.1', 'exit-10',
                 'exit-10-early', 'exit-10-detach', 'exit-10-late', 'exit-10-warmup', 'warmup',
                 'exit-10-sham-noise', 'exit-10-sham-fixed', 'probe', 'embed', 'inject', 'sft',
                 'sft-nopad', 'plain-sft', 'weighted-2', 'deep-first', 'consist-0.1',
                 'gate recipe'], key=len, reverse=True)  # the longest first: exit-10-early, exit-10
PM, PCT = r'[-+]?\d+\.\d+\s+±\s+\d+\.\d+', r'(?<![\w.])-?\d+(?:\.\d+)?%'
UNCHECKED = {'61.6%', '-46%',  # the study's own figures (../shared/seeds)
             '95%', '80%'}  # a confidence level; a rule's and a target's threshold


def named(text):
    """-> the models (the gate recipe is exit-10-early) and the depths (k=N) a text names."""
    text, found = text.lower(), set(re.findall(r'\bk=\d+\b', text.lower()))
    for model in MODELS:
        pattern = r'(?<![\w.+-])' + re.escape(model) + r'(?![\w.])'
        if re.search(pattern, text):
            found.add('exit-10-early' if model == 'gate recipe' else model)
            text = re.sub(pattern, ' ', text)
    return found


def campaigns(text):
    return [c for c in re.findall(r'\blab/([a-z0-9]+)\b(?!\.py)', text) if (REPO / 'lab' / c).is_dir()]


def lines_of(campaign):
    folder = REPO / 'lab' / campaign
    return [line for page in sorted(folder.glob('*.md')) + sorted(folder.glob('*.txt'))
            for line in page.read_text().splitlines()]


def a_ratio(pct, text):  # pct is a / b or |a - b| / b of two numbers the text quotes, as rounded
    p, half = abs(float(pct[:-1])), lambda s: 0.5 * 10 ** -len(s.partition('.')[2])
    nums = [(abs(float(s)), half(s)) for s in re.findall(r'(?<![\w.])-?\d+\.\d+(?![\de%]|\.\d)', text)]
    return any(b and min(abs(100 * a / b - p), abs(100 * abs(a - b) / b - p))
               <= 100 * (ea / b + a * eb / b ** 2) + half(pct[:-1]) for a, ea in nums for b, eb in nums)


def sentences(text):
    """-> (each sentence or table row, with its table's header; the campaigns it may cite)."""
    last = section = None
    lead, header = [], ''
    for block in re.split(r'\n(?=\s*\n|\s*- |#|\|)', text):
        line, own = block.strip(), campaigns(block)
        if line.startswith('#'):
            section = None if line.startswith('## ') else section
            last, lead, header = section, [], ''
        elif line.startswith('|'):
            header = header or line
            if '| --- ' not in line and line != header:
                yield header + '\n' + line, [*own, last, *lead]
        else:
            header, item = '', line.startswith('- ')
            for sentence in re.split(r'(?<=[.!?])\s+(?=[A-Z*(`\[])', block):
                yield sentence, [*own, last, *(lead if item else [])]
            if line and not item and not block.lstrip('\n').startswith(' '):  # not a list's
                lead = own or lead
        if own:
            last, section = own[-1], section or own[0]


def misquoted(text):
    """-> the quoted numbers of a page that their cited page does not give for their comparison."""
    out = []
    for sentence, cited in sentences(text):
        lines = [line for c in dict.fromkeys(cited) if c for line in lines_of(c)]
        same = lambda q, line: ' '.join(q.split()).lstrip('+-') in [
            ' '.join(x.split()).lstrip('+-') for x in re.findall(PM, line)]
        out += [q for q in re.findall(PM, sentence) if not any(
            same(q, line) and named(line) <= named(sentence) for line in lines)]
        out += [q for q in re.findall(PCT, sentence) if q not in UNCHECKED and not a_ratio(q, sentence)
                and not any(re.search(r'(?<![\w.])' + re.escape(q), line) for line in lines)]
    return out


@pytest.mark.parametrize('doc', ['RESULTS.md', 'README.md'])
def test_the_docs_quote_each_number_as_its_page_gives_it(doc):
    text = (REPO / doc).read_text()
    assert len(re.findall(PM, text)) >= (200 if doc == 'RESULTS.md' else 4)
    assert misquoted(text) == []


def test_a_number_quoted_for_another_comparison_is_caught():
    """Two numbers swapped between sentences (the gate recipe's lead over multi, the noise's gain
    on single: both on lab/noise's page), and a percentage no ratio or page gives."""
    text = (REPO / 'RESULTS.md').read_text()
    a, b = '-0.157 ± 0.010', '-0.078 ± 0.012'
    assert text.count(a) == text.count(b) == 2  # (the longer summary, and the campaign's section)
    assert sorted(misquoted(text.replace(a, '@').replace(b, a).replace('@', b))) == [b, b, a, a]
    assert misquoted(text.replace('7.4% of its', '4.7% of its')) == ['4.7%']


def test_two_jobs_train_the_bases_first_and_each_run_once(tmp_path, monkeypatch):
    """campaign with jobs=2: the runs others start from are trained first (two jobs never train one
    run), then every (model, seed) is measured once; a measured run is not trained again."""
    events = []
    monkeypatch.setattr(frontier, 'results', str(tmp_path))
    monkeypatch.setattr(frontier, 'jobs', 2)
    monkeypatch.setattr(frontier, 'seeds', (1, 2))
    monkeypatch.setattr(frontier, 'train', lambda n, s: events.append(('train', n, s)))
    monkeypatch.setattr(frontier, 'measure', lambda n, s: events.append(('measure', n, s)) or n)
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    (tmp_path / 'runs').mkdir()
    (tmp_path / 'runs' / 'multi-s2.json').write_text('{}')  # measured already
    threads = torch.get_num_threads()
    out = frontier.campaign(['sft', 'sft-nopad', 'multi'])
    torch.set_num_threads(threads)
    trained = [e[1:] for e in events if e[0] == 'train']
    assert sorted(trained) == [('multi', 1), ('single', 1), ('single', 2)]
    assert events.index(('train', 'single', 2)) < events.index(('measure', 'sft', 2))
    assert sorted(e[1:] for e in events if e[0] == 'measure') == sorted(
        (n, s) for n in ('sft', 'sft-nopad', 'multi') for s in (1, 2))
    assert out['sft'] == {1: 'sft', 2: 'sft'}


def test_tuned_arms_pair_within_their_schedule_and_ask_the_tradeoff_law_again():
    """Section 11: each tuned arm minus its model; a gated arm minus an ungated one only when both
    ran the same schedule (750 steps, -1500, -wide); and at each setting that single and multi both
    ran, single minus multi's k=1 penalty (the trade-off law at those settings)."""
    def run(k1, k12):  # a run's val NLL at fixed depths 1..12, linear between k=1 and k=12
        return {'val': {'fixed': [{'t': k, 'nll': k1 + (k12 - k1) * (k - 1) / 11}
                                  for k in range(1, 13)]}}
    nlls = {'multi': (2.40, 2.39), 'multi+w100': (2.30, 2.29), 'single+w100': (2.50, 2.30),
            'exit-10-early+w100': (2.20, 2.15), 'multi-1500+w100': (1.95, 1.94)}
    runs = {n: {s: run(k1 + s / 100, k12 + s / 100) for s in (1, 2, 3)}
            for n, (k1, k12) in nlls.items()}
    page = frontier.tuning(runs)
    assert 'multi+w100 minus multi: NLL at k=12 | -0.100' in page
    assert 'exit-10-early+w100 minus multi+w100: NLL at k=12 | -0.140' in page
    assert 'exit-10-early+w100 minus multi-1500+w100' not in page  # 750 steps against 1,500
    # single's k=1 penalty 0.20, multi's 0.01 (at the same settings): the law, 0.190 at every seed
    assert 'single+w100 minus multi+w100: the k=1 penalty | 0.190' in page


def test_a_lab_measurement_never_writes_over_a_committed_page(tmp_path):
    """compile_step.py times train.py for minutes, then used to write over lab/compile/compile_step.md with a
    plain open(). In a copy of the tree whose page is there, it is refused at once, in one line, before any run
    (the copy has no train.py: a run would end in a traceback), and the page is kept."""
    for path in ('guards.py', 'lab/page.py', 'lab/compile/compile_step.py'):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / path, tmp_path / path)
    committed = tmp_path / 'lab' / 'compile' / 'compile_step.md'
    committed.parent.mkdir(parents=True, exist_ok=True)
    committed.write_text('| config | eager ms/iter |\n')
    r = subprocess.run([sys.executable, str(tmp_path / 'lab/compile/compile_step.py')], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 1 and 'Traceback' not in r.stderr, r.stderr
    assert told(r.stderr) == [f"error: {committed} holds a committed measurement: it is kept; move it away "
                                     "to measure again"]
    assert committed.read_text() == '| config | eager ms/iter |\n'
    committed.unlink()  # gone: the same command runs (and meets the missing train.py)
    r = subprocess.run([sys.executable, str(tmp_path / 'lab/compile/compile_step.py')], cwd=tmp_path,
                       capture_output=True, text=True)
    assert 'train.py' in r.stderr and not committed.exists()


# ----------------------------------------------------------------------------- lab/room/room.py
from lab.room import room  # (it imports lab/frontier.py as `frontier`, as lab scripts do)


def tiny_model(loops=(4,)):
    torch.manual_seed(0)
    return GPT(GPTConfig(block_size=32, vocab_size=257, n_embd=16, n_head=2, loops=loops)).eval()


def uniform_points(model, nll):  # the uniform depths' points, as room.measure makes them
    c = model.config
    return [dict(t=k, depth=k, nll=nll[k - 1].mean().item(), flops=room.fr.flops(c, 32, k))
            for k in range(1, len(nll) + 1)]


def test_room_hull_oracle_and_fixed_policies_on_a_tiny_model():
    model = tiny_model()
    rows = torch.randint(0, 257, (6, 32), generator=torch.Generator().manual_seed(1))
    c, tr = model.config, room.trace(model, rows)
    nll, maxprob, resid = frontier.every_depth(model, rows)
    assert torch.equal(tr['nll'], nll) and torch.equal(tr['resid'], resid)  # as n_loops=k scores
    uniform = uniform_points(model, nll)
    # the hull: at depth 1 and at the lowest NLL, that depth's own NLL; never above a depth
    assert room.on(uniform, uniform[0]['flops']) == uniform[0]['nll']
    best = min(uniform, key=lambda p: p['nll'])
    assert room.on(uniform, best['flops']) == best['nll']
    assert all(room.on(uniform, p['flops']) <= p['nll'] + 1e-12 for p in uniform)
    assert np.isnan(room.on(uniform, uniform[0]['flops'] - 1))  # less compute than depth 1: none
    # a policy that always stops at depth k is uniform depth k: its NLL and its FLOPs
    for k in range(1, 5):
        at_k = lambda t, j, v: torch.full(v['pos'].shape, j == k - 1)
        point, = room.selection(tr, 'causal: free', [0], at_k, c, 32)
        assert point['nll'] == pytest.approx(uniform[k - 1]['nll'], abs=1e-6)
        assert point['flops'] == uniform[k - 1]['flops'] and point['depth'] == k
        readout, = room.selection(tr, 'causal: readout', [0], at_k, c, 32)  # a readout a depth
        assert readout['flops'] == room.fr.flops(c, 32, k, readouts=k)
        router, = room.selection(tr, 'router', [0], at_k, c, 32)  # its MLP at each decision
        assert router['flops'] == uniform[k - 1]['flops'] + 2 * 17 * 16 * min(k, 3)
        # frozen, every token stopped after step k is n_loops=k
        frozen, = room.frozen(model, rows, 'causal: free', [0], at_k)
        assert frozen['nll'] == pytest.approx(nll[k - 1].mean().item(), abs=1e-5)
        assert frozen['depth'] == k
    assert room.minus_hull([dict(flops=uniform[0]['flops'], nll=uniform[0]['nll'])],
                           uniform)[0] == pytest.approx(0.0)  # m=1.5 from depth 1's point
    # the oracle: frontier.oracle's choice, and never above the hull at its compute
    per_depth = torch.tensor([p['flops'] for p in uniform], dtype=torch.float64)
    for lam, theirs in zip(room.fr.LAMBDAS, room.fr.oracle(nll, per_depth.tolist())):
        depth = room.priced(nll, per_depth, lam)
        ours = room.scored(lam, room.picked(nll, depth), depth, c, 32)
        assert ours['nll'] == pytest.approx(theirs['nll']) and ours['depth'] == theirs['depth']
        assert ours['nll'] <= room.on(uniform, ours['flops']) + 1e-9
        assert ours['flops'] == pytest.approx(theirs['flops'])


def test_room_hull_mixes_two_depths_at_random_and_keeps_the_best_at_less_compute():
    points = [dict(flops=f, nll=n) for f, n in [(1.0, 3.0), (2.0, 2.9), (3.0, 2.0), (4.0, 2.2)]]
    # depth 2 lies above the chord from 1 to 3: half of each beats it; past depth 3, depth 3's
    assert room.curve(points) == [(1.0, 3.0), (3.0, 2.0)]
    assert room.on(points, 2.0) == pytest.approx(2.5) and room.on(points, 4.0) == 2.0
    convex = [dict(flops=f, nll=n) for f, n in [(1.0, 3.0), (2.0, 2.0), (3.0, 1.5)]]
    assert room.curve(convex) == [(1.0, 3.0), (2.0, 2.0), (3.0, 1.5)]  # each depth on it


def synthetic_trace(n=400):
    """Two depths; a digit gains 1 nat from the second, any other token loses 0.1; the state's first
    coordinate says which."""
    g = torch.Generator().manual_seed(0)
    cls = torch.randint(0, 5, (n,), generator=g)
    digit = (cls == 0).float()
    z = torch.randn(2, n, 8, generator=g)
    z[..., 0] = (2 * digit - 1) * (1 + torch.rand(n, generator=g))
    return dict(nll=torch.stack([torch.full((n,), 2.0), 2.1 - 1.1 * digit]), z=z,
                resid=torch.rand(2, n, generator=g) + 0.1, znorm=torch.rand(2, n, generator=g) + 1,
                maxprob=torch.rand(2, n, generator=g), entropy=torch.rand(2, n, generator=g),
                pos=torch.randint(0, 31, (n,), generator=g), cls=cls)


def test_room_policies_learn_which_tokens_gain_from_depth():
    tr, c = synthetic_trace(), tiny_model((2,)).config
    digit = tr['cls'] == 0
    rules = room.causal(tr, c, 32)
    for kind in ('causal: free', 'causal: state', 'causal: readout'):  # the class says it
        sweep, stop = rules[kind]
        assert torch.equal(stop(0.01, 0, room.view(tr, 0)), ~digit)  # digits go on, others stop
        assert stop(1e4, 0, room.view(tr, 0)).all()  # compute dearer than any gain: all stop
    sweep, stop = rules['router']  # the state's first coordinate says it
    assert torch.equal(stop(0.5, 0, room.view(tr, 0)), ~digit)
    # the class lookup: chosen on one half, applied to the other: digits get the second depth
    per_depth = torch.tensor([room.fr.flops(c, 32, k) for k in (1, 2)], dtype=torch.float64)
    assert torch.equal(room.lookup(tr, per_depth, 0.01), 1 + digit.long())
    # the oracle of another draw: picking with the true NLLs, scored with themselves, is the oracle
    assert torch.equal(room.priced(tr['nll'], per_depth, 0.01), 1 + digit.long())


def save_tiny_run(path, seed):  # a checkpoint as train.py saves one, of an untrained tiny model
    model = tiny_model()
    torch.manual_seed(seed)
    model.head.weight.data.normal_()  # (seeds differ)
    path.parent.mkdir(parents=True)
    torch.save(dict(model=model.state_dict(), model_args=vars(model.config), iter_num=2,
                    meta=dict(tokenizer='byte'), config=dict(dataset='topics_byte', max_iters=2)),
               path)


def test_room_measures_each_run_once_and_draws_its_page(tmp_path, monkeypatch, capsys):
    make_data(tmp_path, 'topics_byte')
    (tmp_path / 'data' / 'topics_byte' / 'train.bin').write_bytes(
        (tmp_path / 'data' / 'topics_byte' / 'val.bin').read_bytes() * 3)
    for seed in (1, 2):
        save_tiny_run(tmp_path / 'runs' / f'arm-s{seed}' / 'ckpt.pt', seed)
    args = ['--runs=runs', '--models=arm', '--seeds=(1,2,3)', '--results=out', '--n_rows=4',
            '--train_rows=8']
    def room_py():
        with monkeypatch.context() as m:
            m.chdir(tmp_path)
            m.setattr(sys, 'argv', ['lab/room/room.py', *args])
            m.setattr(sys, 'excepthook', sys.excepthook)  # configurator.py sets its own: undo it
            runpy.run_path(str(REPO / 'lab' / 'room' / 'room.py'), run_name='__main__')
        return capsys.readouterr().out
    out = room_py()
    assert 'measured arm seed 1' in out and 'arm seed 2: waits' in out  # (its partner: seed 3)
    assert 'arm seed 3: waits' in out
    run = json.loads((tmp_path / 'out' / 'policies' / 'arm-s1.json').read_text())
    assert run['partner'] == 2 and run['frozen'] in run['on_training']
    assert set(run['policies']) == {'oracle', 'seed-pair oracle', 'class lookup', 'causal: free', 'resid exit',
                                    'causal: state', 'causal: readout', 'router', 'frozen', 'frozen resid exit'}
    assert run['rows'] == dict(held_out=[4, 1337], training=[8, 7])
    page = (tmp_path / 'out' / 'room.md').read_text()
    assert '## `arm`: NLL minus the uniform hull' in page and 'no verdict (1 seed)' in page
    (tmp_path / 'out' / 'room.md').write_text(page.replace('\n\n', '\n\n> The answer.\n\n', 1))
    again = room_py()
    assert 'measured' not in again  # read from its file
    assert (tmp_path / 'out' / 'room.md').read_text().startswith(
        '# Per-token depth: how much room can a policy learn?\n\n> The answer.\n\nWritten by')
