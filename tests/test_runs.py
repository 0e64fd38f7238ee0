"""A user's runs: a rerun never replaces a checkpoint, one run at a time per out_dir, Ctrl-C that answers
and can be forced, resume that keeps the run's own settings, each DDP rank's random state, and finding
the checkpoint a user meant. Every script runs as a subprocess on tiny byte-level data (CPU)."""
import os, re, shlex, signal, subprocess, sys, threading

import pytest
import torch

from harness import *  # noqa: F401,F403  (helpers and the jobs/job fixtures)


def watch(p):
    """Collect p's stdout in the background -> (lines, wait_for(pattern, timeout) -> bool)."""
    lines, changed = [], threading.Condition()

    def reader():
        for line in p.stdout:
            with changed:
                lines.append(line)
                changed.notify_all()
        with changed:
            lines.append(None)  # the end
            changed.notify_all()
    threading.Thread(target=reader, daemon=True).start()

    def wait_for(pattern, timeout=PATIENCE):
        with changed:
            return changed.wait_for(lambda: any(l is None or re.search(pattern, l) for l in lines), timeout) \
                and any(l and re.search(pattern, l) for l in lines)
    return lines, wait_for


def text(lines):
    return ''.join(l for l in lines if l)


# ---------------------------------------------------------------- a rerun never replaces a checkpoint
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


def as_typed(command):
    """A printed `python ...` command, run by this test's python (PATH's may be another)."""
    assert command.startswith('python '), command
    return shlex.quote(sys.executable) + command[len('python'):]


def test_rerun_without_resume_refuses_and_says_how(job):
    first, before, rerun, after, m, typed, resumed_iter, over, over_iter, listing = job
    ok(first)
    assert listing == ['ckpt.pt', 'log.jsonl'], 'the finished run left its (0-byte) train.lock behind'
    one_line_error(rerun, 'out/ckpt.pt', 'already holds a run', '--init_from=resume', '--overwrite=True')
    assert after == before and 'saved checkpoint' not in rerun.stdout
    assert m and typed is not None
    assert sorted(losses(ok(typed))) == [3, 4] and resumed_iter == 4  # the printed command resumed
    assert sorted(losses(ok(over))) == [1] and over_iter == 1  # starting over, on purpose


# ---------------------------------------------------------------- one run at a time in an out_dir
@work
def two_runs_into_one_out_dir(d):
    make_data(d)
    p = start(d, 'train.py', *TINY, '--max_iters=100000', '--eval_interval=100000', '--log_interval=100')
    lines, wait_for = watch(p)
    started = wait_for(r'^iter 1: loss')
    second = run(d, 'train.py', *TINY, '--max_iters=3')
    running = p.poll() is None  # the second was refused while the first was still training
    p.send_signal(signal.SIGINT)  # the first goes on, and stops as asked: its checkpoint, whole
    p.wait(timeout=PATIENCE)
    return started and running, second, text(lines), p.returncode, load(d / 'out' / 'ckpt.pt')


def test_two_runs_into_one_out_dir(job):
    started, second, first_out, first_rc, ckpt = job
    assert started
    one_line_error(second, 'another training run', 'out')
    assert first_rc == 130 and f"saved checkpoint to out/ckpt.pt (iter {ckpt['iter_num']})" in first_out
    assert ckpt['iter_num'] >= 1 and ckpt['config']['max_iters'] == 100000  # the first run's, whole


def test_a_crashed_run_leaves_no_lock(tmp_path):
    make_data(tmp_path)
    p = start(tmp_path, 'train.py', *TINY, '--max_iters=100000', '--eval_interval=100000')
    _, wait_for = watch(p)
    assert wait_for(r'^iter 1: loss')
    p.kill()  # no clean-up at all
    p.wait()
    ok(run(tmp_path, 'train.py', *TINY, '--max_iters=2', '--eval_interval=2'))


# ---------------------------------------------------------------- Ctrl-C
SLOW = [*TINY, '--n_embd=128', '--loops=(24,)', '--block_size=128', '--batch_size=8']  # ~1 s a step


@work
def ctrl_c_answers_at_once_and_a_second_one_forces(d):
    make_data(d)
    p = start(d, 'train.py', *SLOW, '--max_iters=100000', '--eval_interval=1', '--eval_iters=1')
    lines, wait_for = watch(p)
    assert wait_for(r'^saved checkpoint .*iter 1\)')
    wait_for(r'^iter 2: loss')
    p.send_signal(signal.SIGINT)
    answered = wait_for(r'^stopping: finishing this step')
    p.send_signal(signal.SIGINT)
    p.wait(timeout=PATIENCE)
    return answered, p.returncode, p.stderr.read(), text(lines), d


def test_ctrl_c_answers_at_once_and_a_second_one_forces(job):
    """The order of events and what is left, not seconds: the first Ctrl-C, sent once iter 2 is logged, is
    answered before the step in flight (iter 3) ends; the second ends the run there, before that step's
    end, its save and its 'interrupted after' line; the checkpoint is the last one saved, whole."""
    answered, rc, err, out, d = job
    assert answered, out
    assert 'iter 3: loss' not in out.split('stopping: ')[0], out  # answered at once, within the step
    assert rc == 1 and 'stopped at once' in err and 'Traceback' not in err, err
    assert 'interrupted after' not in out, out  # forced: the run did not finish its step and save
    ckpt = load(d / 'out' / 'ckpt.pt')  # whole, and at a finished, evaluated step
    saved = re.findall(r'^saved checkpoint to out/ckpt.pt \(iter (\d+)\)$', out, re.M)
    assert ckpt['iter_num'] >= 1 and ckpt['iter_num'] == int(saved[-1])
    assert sorted(os.listdir(d / 'out')) == ['ckpt.pt', 'log.jsonl']  # no half-written .tmp, no lock left


@work
def ctrl_c_during_a_long_eval_is_answered_and_a_second_one_forces(d):
    make_data(d)
    p = start(d, 'train.py', *TINY, '--max_iters=100000', '--eval_interval=2', '--eval_iters=100000')
    lines, wait_for = watch(p)
    shown = wait_for(r'^  eval train: \d+/100000')  # the eval shows progress (every 5 s)
    p.send_signal(signal.SIGINT)
    answered = wait_for(r'^stopping: finishing this step')
    p.send_signal(signal.SIGINT)
    p.wait(timeout=PATIENCE)
    return shown, answered, p.returncode, p.stderr.read(), text(lines)


def test_ctrl_c_during_a_long_eval_is_answered_and_a_second_one_forces(job):
    shown, answered, rc, err, out = job
    assert shown and answered, out
    assert 'iter 2: train loss' not in out, out  # answered within the eval, which never finished
    assert rc == 1 and 'stopped at once' in err and 'Traceback' not in err, err


# ---------------------------------------------------------------- resume keeps the run's settings
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


# ---------------------------------------------------------------- each DDP rank's random stream
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


@pytest.mark.skipif(torch.cuda.is_available(), reason='this machine has CUDA')
def test_cuda_without_a_gpu_says_so(tmp_path):
    make_data(tmp_path)
    for r in run_all(*[(tmp_path, script, '--device=cuda') for script in ('train.py', 'sample.py', 'eval.py')]):
        one_line_error(r, "--device=cuda", 'not usable on this machine', '--device=cpu')


# ---------------------------------------------------------------- a run that never starts
@work
def unusable_device_is_one_line_in_every_script(d):
    make_data(d)
    scripts = [('train.py', *TINY, '--out_dir=out-mps'), ('sample.py',), ('eval.py',),
               ('bench.py',)]
    return run_all(*[(d, *cmd, '--device=mps') for cmd in scripts]), os.path.exists(d / 'out-mps')


def test_unusable_device_is_one_line_in_every_script(job):
    results, made = job
    for r in results:  # train.py: a RuntimeError; sample.py: "a truncated checkpoint"
        one_line_error(r, "--device=mps", 'not usable', '--device=cpu')
    assert not made, 'the out_dir of a run that never started was made (it held a train.lock)'


@work
def max_iters_0_on_a_fresh_run_says_what_is_true(d):
    make_data(d)
    r = run(d, 'train.py', *TINY, '--max_iters=0', '--out_dir=fresh')
    return r, os.path.exists(d / 'fresh')


def test_max_iters_0_on_a_fresh_run_says_what_is_true(job):
    r, made = job
    assert r.returncode != 0 and 'nothing to train: max_iters is 0' in r.stderr, r.stderr
    assert 'ckpt.pt' not in r.stderr and not made  # there is no fresh/ckpt.pt "at iter 0"


@work
def run_from_another_folder_names_the_working_directory(d):
    make_data(d)
    (d / 'elsewhere').mkdir()
    return run(d / 'elsewhere', 'train.py', *TINY), d / 'elsewhere'


def test_run_from_another_folder_names_the_working_directory(job):
    r, cwd = job
    one_line_error(r, 'data/tiny/meta.json not found', f'no data/ in the working directory {cwd}')
    assert list(cwd.iterdir()) == []


@work
def read_only_outputs_are_refused_before_the_work(d):
    copy_run(trained_run(d), d)
    with read_only_folder(d / 'ro'):
        return run_all((d, 'train.py', *TINY, '--out_dir=ro'),
                       (d, 'eval.py', '--device=cpu', '--html=ro/depth.html'))


def test_read_only_outputs_are_refused_before_the_work(job):
    train, evaluate = job
    one_line_error(train, 'cannot write ro: ', '--out_dir')  # was an OSError (the OS's words: read-only,
    one_line_error(evaluate, 'cannot write ro/depth.html: ', '--html')  # or no permission); not after
    assert 'iter ' not in train.stdout and 'suffix NLL' not in evaluate.stdout
