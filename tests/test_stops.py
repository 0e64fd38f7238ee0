"""How a run stops (guards.Stop, the entry handler, the locks): Ctrl-C, SIGTERM and SIGHUP (a terminal closed)
finish the step, save, say how to resume and exit as a shell reports it; a second Ctrl-C stops at once, its
checkpoint the last one saved, whole; a closed pipe (`| head`) ends quietly, and asks a training run to stop and
save; Ctrl-C in sample.py and eval.py is one line; a loss that diverges stops the run, naming the likely cause,
with the last good checkpoint kept; one training run at a time in an out_dir, and a run that dies leaves no lock."""
import json, os, re, signal, subprocess, threading

import pytest

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


# ---------------------------------------------------------------- a signal: finish the step, save, resume
def interrupt_after(p, n_iters, sig):
    """Read p's stdout until 'iter n_iters: loss' is logged, then send sig -> (stdout, stderr)."""
    lines, wait_for = watch(p)
    if not wait_for(rf'^iter {n_iters}: loss'):
        p.kill()
        raise AssertionError(f"no 'iter {n_iters}' logged\n{text(lines)}{p.stderr.read()}")
    p.send_signal(sig)
    try:
        p.wait(timeout=PATIENCE)
    except subprocess.TimeoutExpired:
        p.kill()
    wait_for('(?!)')  # (never found: it waits for the end of the output)
    return text(lines), p.stderr.read()


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


@work
def sighup_saves_and_says_how_to_resume(d, gone):
    """kill -HUP, and a terminal that closed (SIGHUP, then its output goes nowhere): the run used to exit 129
    without a word or a save."""
    make_data(d)
    p = start(d, 'train.py', *TINY, '--max_iters=100000', '--eval_interval=100000')
    out = []
    for line in p.stdout:
        out.append(line)
        if line.startswith('iter 3: loss'):
            p.send_signal(signal.SIGHUP)
            break
    for line in p.stdout:
        out.append(line)
        if line.startswith('stopping:') and gone:
            p.stdout.close()  # what it prints from here on meets a closed pipe (EPIPE), as a closed terminal
            break
    rest, err = p.communicate(timeout=120) if not gone else ('', p.stderr.read())
    p.wait(timeout=120)
    ckpt = (d / 'out' / 'ckpt.pt').exists() and load(d / 'out' / 'ckpt.pt')
    return ''.join(out) + (rest or ''), err, p.returncode, ckpt


@pytest.mark.parametrize('gone', [False, True])
def test_sighup_saves_and_says_how_to_resume(job, gone):
    out, err, rc, ckpt = job
    assert rc == 129, (out, err)
    assert ckpt and ckpt['iter_num'] >= 3, (out, err)
    assert 'Traceback' not in err
    assert "stopping: finishing this step, then saving out/ckpt.pt; resume with  python " in out
    assert '--init_from=resume' in out.split('stopping:')[1]


# ---------------------------------------------------------------- Ctrl-C: answered at once, a second one forces
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


def interrupted(d, cmd):
    """cmd, sent SIGINT (Ctrl-C) once it says on stderr that it computes -> its result."""
    p, said = start(d, *cmd), ''
    while not ('autocast' in said or 'float32' in said) or not said.endswith('\n'):
        said += (chunk := os.read(p.stderr.fileno(), 1 << 16).decode())
        assert chunk, f"{cmd} ended before it computed: {said}"
    p.send_signal(signal.SIGINT)
    r = finish(p)
    return r, said + r.stderr


@work
def ctrl_c_is_one_line(d):
    trained(d)
    return (interrupted(d, (*SAMPLE, '--max_new_tokens=1000000')),
            interrupted(d, (*EVAL, '--eval_iters=100000')), names(d / 'out'))


def test_ctrl_c_is_one_line(job):
    """sample.py and eval.py, Ctrl-C while they compute."""
    *runs, listed = job
    for r, err in runs:
        assert r.returncode == -signal.SIGINT and 'Traceback' not in err, err  # as python ends on SIGINT
        assert err.strip().splitlines()[-1] == 'stopped (Ctrl-C)', err
    assert listed == ['ckpt.pt']  # eval wrote nothing half-way


# ---------------------------------------------------------------- a closed pipe
def reader_gone(d, *cmd):
    """cmd, its stdout a pipe whose reader has gone before it starts (as `| head -0`): whatever it prints
    first meets the closed pipe -> its result."""
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, 'w') as out:
        p = start(d, *cmd, stdout=out)
    return finish(p)


@work
def a_closed_pipe_ends_quietly(d):
    trained(d)  # (no arguments, so no 'Overriding' lines: a sample or the report is first)
    return reader_gone(d, 'sample.py'), reader_gone(d, 'eval.py'), (d / 'out' / 'eval.json').read_text()


def test_a_closed_pipe_ends_quietly(job):
    """`python sample.py ... | head -1`, `python eval.py ... | head` used to end in BrokenPipeError tracebacks,
    and eval's work was lost: now its report is written before it is shown."""
    sample, ev, report = job
    for r in (sample, ev):
        assert r.returncode == 1, r.stderr  # it met the closed pipe (without it: 0)
        assert 'Traceback' not in r.stderr and 'rror' not in r.stderr, r.stderr
    assert 'suffix_nll' in json.loads(report)


@work
def a_closed_pipe_saves_the_training_run(d, ctrl_c):
    """train.py | head: its reader ends after `iter 1` (with ctrl_c: after Ctrl-C, as Ctrl-C ends `| tee` too)."""
    make_data(d)
    p = start(d, 'train.py', *TINY, '--max_iters=100000', '--eval_interval=100000')
    said = [next(line for line in p.stdout if line.startswith('iter 1: loss'))]
    if ctrl_c:
        p.send_signal(signal.SIGINT)
        said.append(next(line for line in p.stdout if line.startswith('stopping:')))
    p.stdout.close()  # what it prints from here on meets a closed pipe
    r = finish(p)
    saved = (d / 'out' / 'ckpt.pt').exists()
    return r, said, saved and load(d / 'out' / 'ckpt.pt'), saved and names(d / 'out')


@pytest.mark.parametrize('ctrl_c', [False, True])
def test_a_closed_pipe_saves_the_training_run(job, ctrl_c):
    """`python train.py config/smoke.py | head -3` used to end without saving what it had trained: a closed
    stdout now asks to stop as a closed terminal does (the step finishes, the run saves), and ends as SIGPIPE
    would (141); after Ctrl-C, a pipe that closes too is not a second request (which would stop at once)."""
    r, said, ckpt, listed = job
    assert r.returncode == (130 if ctrl_c else 141) and told(r.stderr) == [], r.stderr
    assert ckpt and 1 <= ckpt['iter_num'] < 100000, said  # saved what it had said it trained, and stopped
    assert listed == ['ckpt.pt']  # the lock gone, no partial file


# ---------------------------------------------------------------- divergence: the last good checkpoint kept
DIVERGE = ['--init_from=resume', '--learning_rate=1e30', '--grad_clip=0.0', '--warmup_iters=0', '--decay_lr=False',
           '--max_iters=50']


@work
def divergence_stops_with_a_clear_message(d):
    """Resume the trained run (iter 2) with an absurd learning rate: its first update blows the weights up."""
    before = copy_run(trained_run(d), d)
    r = run(d, 'train.py', *TINY, *DIVERGE, '--eval_interval=1000')
    return r, before, (d / 'out' / 'ckpt.pt').read_bytes(), names(d / 'out')


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
    before = copy_run(trained_run(d), d)
    return run(d, 'train.py', *TINY, *DIVERGE, '--eval_interval=3'), before, (d / 'out' / 'ckpt.pt').read_bytes()


def test_divergence_never_overwrites_the_good_checkpoint_even_at_an_eval(job):
    """A non-finite loss is checked after the update too: an update that blows the weights up right before an
    evaluation gives a val loss of nan, which must stop the run before the save writes NaN weights over the last
    good ckpt.pt (and the message's 'ckpt.pt was not overwritten' must stay true)."""
    r, before, after = job
    one_line_error(r, 'loss', 'last good loss')
    assert 'saved checkpoint' not in r.stdout, "a checkpoint was saved after the run diverged:\n" + r.stdout
    assert after == before, 'the last good checkpoint was overwritten with NaN weights'


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


# ---------------------------------------------------------------- a DDP process that dies
@work
def a_ddp_process_that_dies_is_said_by_the_one_left(d):
    make_data(d)
    env = {**ENV, 'WORLD_SIZE': '2', 'LOCAL_WORLD_SIZE': '2', 'MASTER_ADDR': '127.0.0.1',
           'MASTER_PORT': str(master_port())}
    args = [*TINY, '--max_iters=100000', '--eval_interval=100000', '--backend=gloo',
            '--gradient_accumulation_steps=2']
    ranks = [start(d, 'train.py', *args, env={**env, 'RANK': str(r), 'LOCAL_RANK': str(r)}) for r in (0, 1)]
    lines, wait_for = watch(ranks[0])
    trained = wait_for(r'^iter 3: loss')
    ranks[1].kill()  # SIGKILL: no goodbye
    ranks[1].wait(timeout=PATIENCE)
    ranks[0].wait(timeout=PATIENCE)
    return trained, ranks[0].returncode, ranks[0].stderr.read(), text(lines), d


def test_a_ddp_process_that_dies_is_said_by_the_one_left(job):
    """Killing rank 1 used to give rank 0 a gloo traceback. The one left says in one line that another
    process ended and that nothing was saved since the last checkpoint (none here), and promises no save."""
    trained, rc, err, out, d = job
    said = told(err)
    assert trained and rc == 1 and 'Traceback' not in err, err
    assert len(said) == 1 and 'another process of this DDP run ended' in said[0], err
    assert 'nothing was saved since the last checkpoint' in said[0] and 'saved checkpoint' not in out
    assert not (d / 'out' / 'ckpt.pt').exists()
