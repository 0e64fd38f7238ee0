"""Reliability: exact resume, interruption, divergence, hostile or broken checkpoints, DDP equivalence and bad
input, every script run as a subprocess (CPU, tiny models, byte-level data made here, no network).

Speed: each script runs in a process forked from one that imported torch once (harness.py, forkserver.py),
and each test's scripts run in a `@work` function that the module starts in the background (a few threads, in
test order) as soon as the first test asks; the test itself then only waits for its own results and asserts."""
import json, os, re, signal, subprocess, threading

import numpy as np
import pytest
import torch

from harness import *  # noqa: F401,F403  (helpers and the jobs/job fixtures)


def base(d):
    """A folder with data/tiny and out/ckpt.pt of a 2-iteration run, trained once a session (harness.py)."""
    return trained_run(d)


def clone(src, dst):
    """dst/data and dst/out as copies of src's; -> the bytes of the checkpoint."""
    return copy_run(src, dst)


def evals(out):
    return re.findall(r'^iter (\d+): train loss (\S+), val loss (\S+)$', out, re.M)


# ---------------------------------------------------------------- exact resume
@work
def resume_is_bitwise_exact_with_dropout_and_eval(d):
    """20 iterations straight vs 10 + resume + 10; dropout draws from the torch RNG, and the two evaluate at different
    iterations (7, 14, 20 vs 5, 10 | 15, 20), so evaluation provably leaves the training random stream alone."""
    make_data(d)
    args = [*TINY, '--dropout=0.1']
    straight, first = run_all((d, 'train.py', *args, '--max_iters=20', '--eval_interval=7', '--out_dir=straight'),
                              (d, 'train.py', *args, '--max_iters=10', '--eval_interval=5', '--out_dir=split'))
    second = run(d, 'train.py', *args, '--max_iters=20', '--eval_interval=5', '--out_dir=split', '--init_from=resume')
    return d, straight, first, second


def test_resume_is_bitwise_exact_with_dropout_and_eval(job):
    d, straight, first, second = job
    straight, first, second = ok(straight), ok(first), ok(second)
    assert sorted(losses(straight)) == list(range(1, 21))
    assert sorted(losses(first)) == list(range(1, 11)) and sorted(losses(second)) == list(range(11, 21))
    assert losses(straight) == {**losses(first), **losses(second)}  # the same printed loss at every iteration
    assert [e[0] for e in evals(straight)] == ['7', '14', '20']
    assert [e[0] for e in evals(first) + evals(second)] == ['5', '10', '15', '20']
    assert evals(straight)[-1] == evals(second)[-1]  # the same train and val loss at the end
    a, b = load(d / 'straight' / 'ckpt.pt'), load(d / 'split' / 'ckpt.pt')
    assert a['iter_num'] == b['iter_num'] == 20
    assert a['model'].keys() == b['model'].keys()
    for k in a['model']:
        assert torch.equal(a['model'][k], b['model'][k]), k
    for i, state in a['optimizer']['state'].items():  # the AdamW moments too
        for k, v in state.items():
            assert torch.equal(v, b['optimizer']['state'][i][k]), (i, k)


# ---------------------------------------------------------------- interruption
def interrupt_after(p, n_iters, sig, deadline=PATIENCE):
    """Read p's stdout until 'iter n_iters: loss' is logged, then send sig -> (stdout, stderr)."""
    lines, seen, found = [], threading.Event(), []

    def reader():
        for line in p.stdout:
            lines.append(line)
            if re.match(rf'iter {n_iters}: loss', line):
                found.append(line)
                seen.set()
        seen.set()  # end of output: the run ended (or crashed) by itself
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    if not seen.wait(deadline) or not found:
        p.kill()
        raise AssertionError(f"no 'iter {n_iters}' logged (within {deadline}s)\n{''.join(lines)}{p.stderr.read()}")
    p.send_signal(sig)
    try:
        p.wait(timeout=PATIENCE)
    except subprocess.TimeoutExpired:
        p.kill()
    t.join(10)
    return ''.join(lines), p.stderr.read()


SIGNALS = {'SIGTERM': signal.SIGTERM, 'SIGINT': signal.SIGINT}


@work
def interrupt_saves_a_checkpoint_says_how_to_resume_and_resumes(d, name):
    make_data(d)
    p = start(d, 'train.py', *TINY, '--max_iters=100000', '--eval_interval=100000')
    out, err = interrupt_after(p, 3, SIGNALS[name])
    if not (d / 'out' / 'ckpt.pt').exists():
        return out, err, p.returncode, None, None, None
    ckpt, last = load(d / 'out' / 'ckpt.pt'), max(losses(out), default=0)
    resumed = run(d, 'train.py', *TINY, '--init_from=resume', f'--max_iters={last + 2}', '--eval_interval=100000')
    return out, err, p.returncode, ckpt, resumed, load(d / 'out' / 'ckpt.pt')['iter_num']


@pytest.mark.parametrize('name', SIGNALS)
def test_interrupt_saves_a_checkpoint_says_how_to_resume_and_resumes(job, name):
    out, err, rc, ckpt, resumed, resumed_iter = job
    assert 'Traceback' not in err, err
    assert rc == 128 + SIGNALS[name], f"exit status {rc}: `a && b` would go on to b"  # 130, 143
    last = max(losses(out))  # the last finished (logged) iteration
    assert last >= 3
    assert ckpt is not None, f"no checkpoint after {name}\n{out}\n{err}"
    assert ckpt['iter_num'] == last, f"the checkpoint is at iter {ckpt['iter_num']}, the log's last is {last}"
    assert '--init_from=resume' in out + err  # says how to resume
    assert sorted(losses(ok(resumed))) == [last + 1, last + 2]
    assert resumed_iter == last + 2


# ---------------------------------------------------------------- DDP
DDP_ARGS = [*TINY, '--max_iters=5', '--eval_interval=3', '--gradient_accumulation_steps=2']


@work
def ddp_two_processes_match_one_process(d):
    """2 gloo processes, started with the environment torchrun gives them, vs 1 process with the same global batch."""
    make_data(d)
    dist_env = {**ENV, 'WORLD_SIZE': '2', 'LOCAL_WORLD_SIZE': '2', 'MASTER_ADDR': '127.0.0.1', 'MASTER_PORT': str(master_port())}
    ranks = [start(d, 'train.py', *DDP_ARGS, '--backend=gloo', '--out_dir=ddp', env={**dist_env, 'RANK': str(r), 'LOCAL_RANK': str(r)})
             for r in range(2)]
    single = run(d, 'train.py', *DDP_ARGS, '--out_dir=single')
    return d, [finish(p) for p in ranks], single


def test_ddp_two_processes_match_one_process(job):
    d, (rank0, rank1), single = job
    rank0, rank1, single = ok(rank0), ok(rank1), ok(single)
    ddp_losses, one_losses = losses(rank0), losses(single)
    assert sorted(ddp_losses) == sorted(one_losses) == list(range(1, 6))
    for i in one_losses:
        assert abs(ddp_losses[i] - one_losses[i]) < 1e-4, (i, ddp_losses[i], one_losses[i])
    for i in range(1, 6):  # each log line once, from rank 0 only
        assert len(re.findall(rf'^iter {i}: loss', rank0, re.M)) == 1
    assert not re.search(r'^iter \d+:', rank1, re.M), rank1
    assert rank0.count('saved checkpoint') == 2 and 'saved checkpoint' not in rank1  # at iter 3 and 5, by rank 0
    a, b = load(d / 'ddp' / 'ckpt.pt'), load(d / 'single' / 'ckpt.pt')
    assert a['iter_num'] == b['iter_num'] == 5
    for k in a['model']:
        torch.testing.assert_close(a['model'][k], b['model'][k], atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------- divergence
DIVERGE = ['--init_from=resume', '--learning_rate=1e30', '--grad_clip=0.0', '--warmup_iters=0', '--decay_lr=False',
           '--max_iters=50']


@work
def divergence_stops_with_a_clear_message(d):
    """Resume the base run (iter 2) with an absurd learning rate: its first update blows the weights up."""
    before = clone(base(d), d)
    r = run(d, 'train.py', *TINY, *DIVERGE, '--eval_interval=1000')
    return r, before, (d / 'out' / 'ckpt.pt').read_bytes(), sorted(n for n in os.listdir(d / 'out') if n != 'log.jsonl')


def test_divergence_stops_with_a_clear_message(job):
    r, before, after, listing = job
    msg = one_line_error(r, 'loss', 'last good loss', 'learning_rate', 'alpha')
    assert '(this run sets --grad_clip=0.0 --learning_rate=1e+30)' in msg, msg  # the floats it gives: the cause
    assert listing == ['ckpt.pt'], 'the run left more than its checkpoint (a train.lock?)'
    assert re.search(r'\b(nan|inf)\b', msg), msg
    logged = losses(r.stdout)
    last = max(logged)
    m = re.search(r'iter (\d+)', msg)
    assert m and int(m.group(1)) in (last, last + 1), msg  # the step that diverged
    good = re.search(r'last good loss ([\d.]+)', msg)
    assert good and abs(float(good.group(1)) - logged[last]) < 1e-4, msg
    assert after == before  # the last good checkpoint is untouched


@work
def divergence_never_overwrites_the_good_checkpoint_even_at_an_eval(d):
    """The same, with an evaluation (and so a checkpoint save) right after the update that blew up."""
    before = clone(base(d), d)
    return run(d, 'train.py', *TINY, *DIVERGE, '--eval_interval=3'), before, (d / 'out' / 'ckpt.pt').read_bytes()


def test_divergence_never_overwrites_the_good_checkpoint_even_at_an_eval(job):
    # BUG (train.py, the eval/save block after optimizer.step()): the NaN check only looks at the loss computed
    # *before* the update, so when the exploding update lands right before an evaluation, estimate_loss() returns
    # nan and, with always_save_checkpoint=True, save_checkpoint() writes the NaN weights over the last good
    # ckpt.pt; the next step then stops with "... ckpt.pt was not overwritten", which is no longer true.
    r, before, after = job
    one_line_error(r, 'loss', 'last good loss')
    assert 'saved checkpoint' not in r.stdout, "a checkpoint was saved after the run diverged:\n" + r.stdout
    assert after == before, 'the last good checkpoint was overwritten with NaN weights'


# ---------------------------------------------------------------- hostile and broken checkpoints
class Exploit:
    """Unpickling this runs os.mkdir(marker): a stand-in for arbitrary code in a downloaded checkpoint."""
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def test_the_exploit_would_run_if_unpickled(tmp_path):
    """The fixture is real: an unsafe torch.load of it does create the marker."""
    torch.save({'model_args': Exploit(tmp_path / 'PWNED')}, tmp_path / 'ckpt.pt')
    torch.load(tmp_path / 'ckpt.pt', weights_only=False)
    assert (tmp_path / 'PWNED').is_dir()


SAMPLE = ('sample.py', '--out_dir=out', '--device=cpu', '--max_new_tokens=2')
RESUME = ('train.py', *TINY, '--init_from=resume', '--max_iters=4')
CKPT_CASES = {'program_sample': ('program', SAMPLE), 'program_resume': ('program', RESUME),
              'truncated_sample': ('truncated', SAMPLE), 'foreign_resume': ('foreign', RESUME)}


@work
def bad_checkpoint_is_refused_with_one_line(d, case):
    kind, cmd = CKPT_CASES[case]
    clone(base(d), d)
    ckpt = d / 'out' / 'ckpt.pt'
    if kind == 'program':  # a checkpoint carrying a pickled program
        torch.save({'model_args': Exploit(d / 'PWNED'), 'model': {}, 'meta': META, 'iter_num': 0}, ckpt)
    elif kind == 'truncated':  # a cut-off copy
        ckpt.write_bytes(ckpt.read_bytes()[:ckpt.stat().st_size // 2])
    else:  # some other file under the checkpoint's name
        ckpt.write_text('iter 2: loss 5.4; my notes on this run, not a checkpoint\n')
    before = ckpt.read_bytes()
    return run(d, *cmd), (d / 'PWNED').exists(), before, ckpt.read_bytes()


@pytest.mark.parametrize('case', CKPT_CASES)
def test_bad_checkpoint_is_refused_with_one_line(job, case):
    r, pwned, before, after = job
    one_line_error(r, os.path.join('out', 'ckpt.pt'), 'checkpoint')
    assert not pwned, 'loading the checkpoint ran the pickled program'
    assert after == before and 'saved checkpoint' not in r.stdout


# ---------------------------------------------------------------- bad input: one line naming the fix
# (unknown config key, wrong type and a missing config file: test_train.py's configurator test, same check)
def edit_meta_vocab(d):
    meta = json.loads((d / 'data' / 'tiny' / 'meta.json').read_text())
    (d / 'data' / 'tiny' / 'meta.json').write_text(json.dumps({**meta, 'tokenizer': 'gpt2', 'vocab_size': 50257,
                                                               'eot': 50256}))  # re-prepared: the other one


def short_train_bin(d):
    np.arange(10, dtype=np.uint16).tofile(d / 'data' / 'tiny' / 'train.bin')


BAD = {  # name: (setup(folder) or None, script and args, words the one line must contain)
    'dataset_missing': (None, ('train.py', *TINY, '--dataset=shakespeare_byte'),
                        ['data/shakespeare_byte/meta.json',
                         'python prepare.py --dataset=shakespeare --tokenizer=byte']),
    'vocab_changed': (edit_meta_vocab, RESUME, ['meta.json', 'vocab_size', '50257', '257', '--dataset=tiny']),
    'n_embd_n_head': (None, ('train.py', *TINY, '--n_embd=30', '--n_head=4'), ['n_embd=30', 'n_head=4', 'n_embd must be a multiple of n_head']),
    'loops_zero': (None, ('train.py', *TINY, '--loops=(2,0)'), ['loops=(2, 0)', 'need a tuple of whole numbers, each at least 1']),
    'loops_negative': (None, ('train.py', *TINY, '--loops=-1'), ['loops=(-1,)', 'need a tuple of whole numbers, each at least 1']),
    'supervise_too_deep': (None, ('train.py', *TINY, '--loops=(2,1)', '--supervise=(1,4)'), ['supervise=(1, 4)', 'loops=(2, 1)', 'a supervised depth is past the last iteration']),
    'empty_prompt': (None, ('sample.py', '--start=', '--device=cpu'), ['prompt', 'empty']),
    'prompt_file_missing': (None, ('sample.py', '--start=FILE:nope.txt', '--device=cpu'), ['prompt file nope.txt', 'No such file']),
    'data_shorter_than_block': (short_train_bin, ('train.py', *TINY), ['train.bin', '10 tokens', 'block_size']),
    'bench_exit_at': (None, ('bench.py', '--exit_at=maxprob', '--device=cpu'), ['--exit_at=maxprob:', 'maxprob:0.9']),
    'bench_past_block_size': (None, ('bench.py', '--init_from=out', '--prompt=abc', '--device=cpu'),
                              ['3 + 256', 'block_size 32']),
    'alpha_init_one': (None, ('train.py', *TINY, '--alpha_init=1.0'), ['alpha_init=1.0', 'need 0 < alpha_init < 1']),
    'alpha_init_zero': (None, ('train.py', *TINY, '--alpha_init=0.0'), ['alpha_init=0.0', 'need 0 < alpha_init < 1']),
    'n_head_zero': (None, ('train.py', *TINY, '--n_head=0'), ['n_head=0', '>= 1']),
    'block_size_huge': (None, ('train.py', *TINY, '--block_size=100000000'), ['train.bin', 'block_size']),
    'config_raises': (lambda d: (d / 'mine.py').write_text('batch_size = 8\nlr = 1 / 0\n'),
                      ('train.py', 'mine.py'), ['mine.py', 'line 2', 'ZeroDivisionError']),
    'config_is_a_folder': (None, ('train.py', 'data'), ['config file data', 'Is a directory']),
    # issue 23: no prepare.py command makes these two (it used to suggest one)
    'dataset_unknown': (None, ('train.py', *TINY, '--dataset=nope_byte'),
                        ['data/nope_byte/meta.json', 'topics,shakespeare', 'not nope_byte',
                         'check --dataset']),
    'dataset_outside_data': (None, ('train.py', *TINY, '--dataset=../../etc'),
                             ['--dataset=../../etc', 'the name of a folder in data/, not a path']),
    'init_from_without_ckpt': (lambda d: (d / 'nodir').mkdir(),
                               ('train.py', *TINY, '--init_from=nodir'),
                               ['no checkpoint at nodir/ckpt.pt', 'found out/ckpt.pt',
                                '--init_from=out']),
    'out_dir_is_a_file': (lambda d: (d / 'afile').write_text('mine'),
                          ('train.py', *TINY, '--out_dir=afile'),
                          ['cannot write afile: File exists', '--out_dir']),
    'config_syntax_error': (lambda d: (d / 'mine.py').write_text('batch_size = 8\nlr = (1\n'),
                            ('train.py', 'mine.py'),
                            ["config file 'mine.py'", 'line 2', 'SyntaxError']),
}


@work
def bad_input_is_one_line_error_naming_the_fix(d, case):
    setup, cmd, _ = BAD[case]
    before = clone(base(d), d)
    if setup:
        setup(d)
    return run(d, *cmd), before, (d / 'out' / 'ckpt.pt').read_bytes(), sorted(n for n in os.listdir(d / 'out') if n != 'log.jsonl')


@pytest.mark.parametrize('case', BAD)
def test_bad_input_is_one_line_error_naming_the_fix(job, case):
    r, before, after, listing = job
    one_line_error(r, *BAD[case][2])
    # a failed run never touches an existing checkpoint (every case has one in out/, the resume case reads it)
    assert after == before and listing == ['ckpt.pt'] and 'saved checkpoint' not in r.stdout


# ---------------------------------------------------------------- a read-only disk (a full one: test_faults.py)
@work
def save_on_a_read_only_disk_is_refused_before_any_work(d):
    """out/ckpt.pt, a link to a checkpoint in a read-only folder: the save goes beside the link's target, and the
    probe meets the read-only folder before training."""
    before = clone(base(d), d)
    with read_only_folder(d / 'ro', {'ckpt.pt': before}):
        (d / 'out' / 'ckpt.pt').unlink()
        os.symlink(d / 'ro' / 'ckpt.pt', d / 'out' / 'ckpt.pt')
        r = run(d, 'train.py', *TINY, '--init_from=resume', '--max_iters=3', '--eval_interval=3')
        return r, before, (d / 'out' / 'ckpt.pt').read_bytes(), sorted(n for n in os.listdir(d / 'out') if n != 'log.jsonl')


def test_save_on_a_read_only_disk_is_refused_before_any_work(job):
    r, before, after, listing = job
    one_line_error(r, 'cannot write', '/ro/ckpt.pt', '--out_dir')  # read-only, or no access
    assert after == before and listing == ['ckpt.pt'] and 'iter 3' not in r.stdout
