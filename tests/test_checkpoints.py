"""Checkpoints: what loads (guards.load_checkpoint: tensors and plain data only, never code; the checksum saved
beside the weights; the settings it holds checked as input, check_saved), what resumes (bitwise exactly, in every
documented form, each DDP rank's random stream, the run's own settings kept, those it fixes refused), and what is
never replaced by accident (a rerun refuses and says how to resume; a fine-tune keeps the architecture). A
damaged, hostile, edited, foreign or missing checkpoint is one line naming the file (and the runs that exist),
and is left as it was."""
import ast, os, re, shlex, struct, subprocess, sys, zipfile

import pytest
import torch

from harness import *  # noqa: F401,F403  (helpers, tables' runners and the jobs/job/here fixtures)
from model import GPT, GPTConfig
from guards import InputError, load_checkpoint


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


def a_program(d):  # a checkpoint carrying a pickled program (loading it would make the folder PWNED)
    torch.save({'model_args': Exploit(d / 'PWNED'), 'model': {}, 'meta': META, 'iter_num': 0}, d / 'out' / 'ckpt.pt')


def cut_off(d):  # a cut-off copy
    ckpt = d / 'out' / 'ckpt.pt'
    ckpt.write_bytes(ckpt.read_bytes()[:ckpt.stat().st_size // 2])


def foreign(d):  # some other file under the checkpoint's name
    (d / 'out' / 'ckpt.pt').write_text('iter 2: loss 5.4; my notes on this run, not a checkpoint\n')


def strip_checkpoint(d, key):  # out/ckpt.pt without one of its keys (saved by another program)
    edit_ckpt(d, lambda ckpt: ckpt.pop(key))


# ---------------------------------------------------------------- a bad checkpoint, as a process: one line, untouched
RESUME = ('train.py', *TINY, '--init_from=resume', '--max_iters=4')
IS_NOT = ['out/ckpt.pt', 'checkpoint']
BAD = {  # name: (the folder it starts from, its change, script and args, words the one line must contain)
    **on(trained, {
        'program_sample': (a_program, SAMPLE, IS_NOT), 'program_resume': (a_program, RESUME, IS_NOT),
        'truncated_sample': (cut_off, SAMPLE, IS_NOT), 'foreign_resume': (foreign, RESUME, IS_NOT),
        'init_from_without_ckpt': (lambda d: (d / 'nodir').mkdir(), ('train.py', *TINY, '--init_from=nodir'),
                                   ['no checkpoint at nodir/ckpt.pt', 'found out/ckpt.pt', '--init_from=out'])}),
    **on(untrained, {
        'checkpoint_without_meta': (lambda d: strip_checkpoint(d, 'meta'), SAMPLE,
                                    ['out/ckpt.pt', "KeyError: 'meta'", 'train.py'])})}


@work
def bad_checkpoint_is_refused_with_one_line(d, case):
    return refused_run(d, *BAD[case][:3])


@pytest.mark.parametrize('case', BAD)
def test_bad_checkpoint_is_refused_with_one_line(job, case):
    """... and nothing made: loading the program checkpoint would make the folder PWNED."""
    refused(job, BAD[case][3])


def overwrite_a_tensor(ckpt, data=b'\x00\x00\x80\x3f' * 4):  # four weights of the largest tensor: 1.0 each
    with zipfile.ZipFile(ckpt) as z:
        info = max((i for i in z.infolist() if '/data/' in i.filename), key=lambda i: i.file_size)
    with open(ckpt, 'r+b') as f:
        f.seek(info.header_offset + 26)
        name, extra = struct.unpack('<HH', f.read(4))
        f.seek(info.header_offset + 30 + name + extra + info.file_size // 2)
        f.write(data)


@work
def a_checkpoint_damaged_in_place(d):
    trained(d)
    overwrite_a_tensor(d / 'out' / 'ckpt.pt')
    before = (d / 'out' / 'ckpt.pt').read_bytes()
    runs = run_all((d, *SAMPLE), (d, *EVAL), (d, 'train.py', *TINY, '--init_from=resume', '--max_iters=4'))
    return runs, before, (d / 'out' / 'ckpt.pt').read_bytes(), names(d / 'out')


def test_a_checkpoint_damaged_in_place(job):
    """It used to load without a word: sampling died in torch.multinomial, eval wrote NaN into eval.json."""
    runs, before, after, listed = job
    for r in runs:
        one_line_error(r, 'out/ckpt.pt is damaged', 'checksum')
    assert after == before and listed == ['ckpt.pt']


# ---------------------------------------------------------------- exact resume
def evals(out):
    return re.findall(r'^iter (\d+): train loss (\S+), val loss (\S+)$', out, re.M)


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


FAKE_BF16 = ('-c', "import os, runpy, sys, torch; "  # a CPU with bf16 instructions, wherever the test runs
             "torch.cpu._is_amx_tile_supported = torch.cpu._is_avx512_bf16_supported = lambda: True; "
             "sys.argv = sys.argv[1:]; sys.path.insert(0, os.path.dirname(sys.argv[0])); "
             "runpy.run_path(sys.argv[0], run_name='__main__')")


def config_file(path, args):
    """A config file that sets what --key=value arguments set."""
    lines = []
    for arg in args:
        key, value = arg[2:].split('=', 1)
        try:
            value = ast.literal_eval(value)
        except (SyntaxError, ValueError):
            pass  # a bare text, as configurator.py reads it
        lines.append(f"{key} = {value!r}\n")
    path.write_text(''.join(lines))


@work
def resume_in_every_documented_form(d):
    """A float32-pinned run (like config/smoke.py) on a CPU whose default is bf16: 12 iterations straight, against
    6 + resume + 6 in the form ERRORS.md documents (no config file) and in the form train.py prints (the same
    command + --init_from=resume). Then eval.py and sample.py of it, which must compute in float32 too."""
    make_data(d)
    config_file(d / 'tiny.py', [*TINY, '--dtype=float32'])
    go = lambda *args: start(d, 'train.py', *args, launcher=FAKE_BF16)
    straight, bare, typed = [finish(p) for p in (go('tiny.py', '--max_iters=12', '--out_dir=straight'),
                                                 go('tiny.py', '--max_iters=6', '--out_dir=bare'),
                                                 go('tiny.py', '--max_iters=6', '--out_dir=typed'))]
    resumed = [finish(p) for p in (go('--out_dir=bare', '--init_from=resume', '--max_iters=12'),
                                   go('tiny.py', '--out_dir=typed', '--max_iters=12', '--init_from=resume'))]
    ckpts = {name: load(d / name / 'ckpt.pt') for name in ('straight', 'bare', 'typed')}
    # the run's warmup (2) is what --lr_decay_iters must pass, not the default's (1000)
    resumed.append(finish(go('--out_dir=straight', '--init_from=resume', '--max_iters=13', '--lr_decay_iters=50')))
    scripts = [finish(start(d, *cmd, launcher=FAKE_BF16)) for cmd in (
        ('eval.py', '--out_dir=bare', '--eval_iters=1', '--batch_size=4'),
        ('sample.py', '--out_dir=bare', '--max_new_tokens=2', '--num_samples=1'))]
    return straight, bare, typed, resumed, scripts, ckpts


def test_resume_in_every_documented_form(job):
    straight, bare, typed, resumed, (ev, sample), ckpts = job
    for r in (straight, bare, typed, *resumed):
        ok(r)
    assert 'float32: the dtype the model was trained with' in ev.stderr  # eval.py used to score it in bf16
    assert 'float32: the dtype the model was trained with' in sample.stderr
    straight_ckpt = ckpts['straight']
    for name in ('bare', 'typed'):
        assert ckpts[name]['iter_num'] == 12 and ckpts[name]['config']['dtype'] == 'float32'
        for k, v in straight_ckpt['model'].items():
            assert torch.equal(v, ckpts[name]['model'][k]), (name, k)  # the bare form used to differ by 2.5e-4


DDP = [*TINY, '--dropout=0.1', '--gradient_accumulation_steps=2', '--backend=gloo']


def ddp(d, *args):
    """2 gloo ranks with the environment torchrun gives them (a free port: tests run side by side)."""
    return ddp_ranks(d, *DDP, *args)[0]


@work
def ddp_resume_continues_every_ranks_random_stream(d):
    make_data(d)
    straight = ddp(d, '--max_iters=4', '--eval_interval=4', '--out_dir=straight')
    ok(ddp(d, '--max_iters=2', '--eval_interval=2', '--out_dir=split'))
    second = ddp(d, '--max_iters=4', '--eval_interval=4', '--out_dir=split', '--init_from=resume')
    return straight, second


def test_ddp_resume_continues_every_ranks_random_stream(job):
    straight, second = job
    a, b = losses(ok(straight)), losses(ok(second))
    assert sorted(b) == [3, 4] and all(a[i] == b[i] for i in (3, 4)), (a, b)  # dropout resumed exactly


# ---------------------------------------------------------------- resume keeps the run; a rerun never replaces it
@work
def resume_keeps_the_runs_own_settings(d):
    make_data(d)
    ok(run(d, 'train.py', *TINY, '--max_iters=2', '--eval_interval=2', '--learning_rate=0.002'))
    bare = ['--dataset=tiny', '--device=cpu', '--init_from=resume']  # none of the run's settings
    changed = run(d, 'train.py', *bare, '--max_iters=4', '--eval_interval=4', '--min_lr=0.0001')
    refused = [run(d, 'train.py', *bare, '--max_iters=6', arg)
               for arg in ('--n_embd=64', '--block_size=16', '--loops=(8,)', '--dataset=other')]
    nothing = run(d, 'train.py', *bare, '--max_iters=3')
    return changed, load(d / 'out' / 'ckpt.pt'), refused, nothing


def test_resume_keeps_the_runs_own_settings(job):
    changed, ckpt, refused, nothing = job
    out = ok(changed)
    assert 'tokens per iteration: 128;' in out  # the run's batch 4 x block 32, not the defaults
    assert sorted(losses(out)) == [3, 4]
    cfg = ckpt['config']
    assert (cfg['batch_size'], cfg['learning_rate'], cfg['eval_iters']) == (4, 0.002, 2)  # kept
    assert (cfg['max_iters'], cfg['eval_interval'], cfg['min_lr']) == (4, 4, 0.0001)  # changed
    assert ckpt['model_args']['n_embd'] == 32
    for r, key in zip(refused, ('n_embd', 'block_size', 'loops', 'dataset')):
        one_line_error(r, f'--{key}=', 'resuming cannot change')
    assert 'nothing to train' in nothing.stderr and 'max_iters' in nothing.stderr


def as_typed(command):
    """A printed `python ...` command, run by this test's python (PATH's may be another)."""
    assert command.startswith('python '), command
    return shlex.quote(sys.executable) + command[len('python'):]


@work
def rerun_without_resume_refuses_and_says_how(d):
    make_data(d)
    first = run(d, 'train.py', *TINY, '--max_iters=2', '--eval_interval=2')
    listing = sorted(os.listdir(d / 'out'))
    before = (d / 'out' / 'ckpt.pt').read_bytes()
    rerun = run(d, 'train.py', *TINY, '--max_iters=4', '--eval_interval=2')
    after = (d / 'out' / 'ckpt.pt').read_bytes()
    m = re.search(r'resume it with  (.+?)  or', rerun.stderr)
    typed = subprocess.run(['bash', '-c', as_typed(m.group(1))], cwd=d, env=ENV,
                           capture_output=True, text=True, timeout=PATIENCE) if m else None  # as typed
    resumed_iter = load(d / 'out' / 'ckpt.pt')['iter_num']
    over = run(d, 'train.py', *TINY, '--max_iters=1', '--eval_interval=1', '--overwrite=True')
    over_iter = load(d / 'out' / 'ckpt.pt')['iter_num']
    return first, before, rerun, after, m, typed, resumed_iter, over, over_iter, listing


def test_rerun_without_resume_refuses_and_says_how(job):
    first, before, rerun, after, m, typed, resumed_iter, over, over_iter, listing = job
    ok(first)
    assert listing == ['ckpt.pt', 'log.jsonl'], 'the finished run left its (0-byte) train.lock behind'
    one_line_error(rerun, 'out/ckpt.pt', 'already holds a run', '--init_from=resume', '--overwrite=True')
    assert after == before and 'saved checkpoint' not in rerun.stdout
    assert m and typed is not None
    assert sorted(losses(ok(typed))) == [3, 4] and resumed_iter == 4  # the printed command resumed
    assert sorted(losses(ok(over))) == [1] and over_iter == 1  # starting over, on purpose


# ---------------------------------------------------------------- the checkpoint the user meant
@work
def sample_without_out_dir_names_the_runs_that_exist(d):
    copy_run(trained_run(d), d, out='out-v13')
    r = run(d, 'sample.py', '--device=cpu', '--max_new_tokens=3', '--num_samples=1')
    m = re.search(r'add (--out_dir=\S+)', r.stderr)
    return r, m and run(d, 'sample.py', m.group(1), '--device=cpu', '--max_new_tokens=3', '--num_samples=1')


def test_sample_without_out_dir_names_the_runs_that_exist(job):
    r, followed = job
    one_line_error(r, 'no checkpoint at out/ckpt.pt', 'out-v13/ckpt.pt', '--out_dir=out-v13')
    assert followed and ok(followed)


def test_a_missing_checkpoint_names_a_few_candidates(tmp_path, monkeypatch):
    """A typo'd --out_dir among many runs: the closest and the newest, five at most (it used to list them all)."""
    monkeypatch.chdir(tmp_path)
    for i in range(8):
        (tmp_path / f'run-{i}').mkdir()
        (tmp_path / f'run-{i}' / 'ckpt.pt').write_bytes(b'')
        os.utime(tmp_path / f'run-{i}' / 'ckpt.pt', (i, i))  # run-7 the newest
    with pytest.raises(InputError) as e:
        load_checkpoint('run-2x/ckpt.pt', GPT.from_checkpoint)
    found = str(e.value).split('found ')[1].split(' and ')[0].split(', ')
    assert found == ['run-2/ckpt.pt', 'run-7/ckpt.pt', 'run-6/ckpt.pt', 'run-5/ckpt.pt', 'run-4/ckpt.pt'], e.value
    assert str(e.value).endswith('and 3 more: add --out_dir=run-2')


# ---------------------------------------------------------------- a checkpoint that does not fit: run here
def resumable(ckpt, **config):
    """ckpt, with an optimizer's state (train.py's, for its model) to resume, and config's settings."""
    model = GPT(GPTConfig(**ckpt['model_args']))
    ckpt.update(optimizer=model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), 'cpu').state_dict())
    ckpt['config'].update(config)


OPTIONS = {  # name: (change(folder) or None, script and args, words the error line must contain)
    'resume_out_dir_typo': (lambda d: [save_model(d / n) for n in ('out-smoke', 'out-act')],
                            (*TRAIN, '--out_dir=out-smok', '--init_from=resume'), ['--out_dir=out-smoke']),
    'checkpoint_with_an_unknown_model_arg': (lambda d: edit_ckpt(d, lambda c: c['model_args'].update(n_layer=6)),
                                             SAMPLE, ['out/ckpt.pt', "'n_layer'", 'version']),
    'checkpoint_lacking_a_parameter': (lambda d: edit_ckpt(d, lambda c: c['model'].pop('ln_f.weight')),
                                       SAMPLE, ['out/ckpt.pt', 'ln_f.weight', 'version']),
    'fine_tune_changing_the_architecture': (None, (*TRAIN, '--init_from=out', '--out_dir=ft', '--n_embd=32'),
                                            ['--n_embd=32', '--n_embd=16', 'fine-tuning cannot change']),
    'init_from_typo': (None, (*TRAIN, '--init_from=ot', '--out_dir=ft'), ['no checkpoint at ot/ckpt.pt',
                                                                          '--init_from=out']),
    'checkpoint_with_a_wrong_shape': (lambda d: edit_ckpt(d, lambda c: c['model'].update(
        {'ln_f.weight': torch.ones(3)})), SAMPLE, ['out/ckpt.pt', 'ln_f.weight', 'shape']),
    'out_dir_the_checkpoint_file': (None, (*SAMPLE, '--out_dir=out/ckpt.pt'),
                                    ['no checkpoint at out/ckpt.pt/ckpt.pt', 'found out/ckpt.pt', '--out_dir=out']),
    # a checkpoint's settings are input: checked against the command line's domains (a traceback, or a hint to
    # lower --min_lr for learning_rate='fast')
    'checkpoint_with_a_negative_batch_size': (lambda d: edit_ckpt(d, lambda c: resumable(c, batch_size=-5)),
                                              (*[a for a in TRAIN if '--batch_size' not in a], '--max_iters=2',
                                               '--init_from=resume'),
                                              ['out/ckpt.pt holds batch_size = -5', 'batch_size >= 1', 'edited']),
    'checkpoint_with_a_learning_rate_in_words': (
        lambda d: edit_ckpt(d, lambda c: c['config'].update(learning_rate='fast', min_lr=1e-4)), SAMPLE,
        ["out/ckpt.pt holds learning_rate = 'fast'", 'learning_rate > 0', 'use another, or train it again']),
    'checkpoint_with_a_batch_size_of_another_type': (
        lambda d: edit_ckpt(d, lambda c: c['config'].update(batch_size=4.0)), EVAL,
        ['out/ckpt.pt holds batch_size = 4.0', 'a value of type int']),
    'checkpoint_with_heads_that_do_not_divide': (
        lambda d: edit_ckpt(d, lambda c: c['model_args'].update(n_head=0)), SAMPLE,
        ['out/ckpt.pt holds n_head = 0', 'n_head >= 1']),
}


@pytest.mark.parametrize('case', OPTIONS)
def test_a_checkpoint_that_does_not_fit_is_one_line_in_its_syntax(case, here, monkeypatch, capsys):
    refused_here(here, *OPTIONS[case], monkeypatch, capsys)


def test_a_checkpoint_of_another_version_names_the_keys(tmp_path):
    save_model(tmp_path)
    ckpt = torch.load(tmp_path / 'ckpt.pt', weights_only=True)
    ckpt['model_args']['n_layer'] = 6
    torch.save(ckpt, tmp_path / 'ckpt.pt')
    with pytest.raises(InputError, match="n_layer"):
        load_checkpoint(str(tmp_path / 'ckpt.pt'), GPT.from_checkpoint)


def test_a_checkpoint_without_the_data_it_names_is_one_line(tmp_path):
    """A checkpoint whose meta lacks its tokenizer, or its config its dataset, used to be a KeyError later."""
    save_model(tmp_path / 'out')
    for part, key in (('meta', 'tokenizer'), ('config', 'dataset')):
        ckpt = torch.load(tmp_path / 'out' / 'ckpt.pt', weights_only=True)
        del ckpt[part][key]
        torch.save(ckpt, tmp_path / f'{part}.pt')
        with pytest.raises(InputError, match=rf"is not a checkpoint .*KeyError: '{key}'"):
            load_checkpoint(str(tmp_path / f'{part}.pt'), GPT.from_checkpoint)
