"""Real faults, made for real, each ending in one line (or quietly) with nothing the user had lost: a file-size
limit (RLIMIT_FSIZE, with SIGXFSZ ignored, so that a write fails as on a full disk) while a checkpoint, a report
and a dataset are written; a closed pipe; Ctrl-C (SIGINT) in sample.py and eval.py; a tensor's bytes overwritten
in a saved checkpoint; a FIFO where a file belongs, one given as the prompt and one among the downloads; config
files that are Python."""
import json, os, signal, struct, subprocess, sys, threading, zipfile

import pytest

from harness import *  # noqa: F401,F403  (helpers and the jobs/job fixtures)
from harness import SERVER, ENV, PATIENCE
from prepare import SHAKESPEARE

EVAL = ('eval.py', '--out_dir=out', '--device=cpu', '--eval_iters=1', '--batch_size=4')
SAMPLE = ('sample.py', '--out_dir=out', '--device=cpu', '--num_samples=1', '--max_new_tokens=5')
LIMITED = """import resource, runpy, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]),) * 2)
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name='__main__')"""


def limited(cwd, limit, script, *args):
    """`python script args` in cwd, no file of it larger than limit bytes."""
    return finish(SERVER.start(['-c', LIMITED, str(limit), str(REPO / script), *map(str, args)], cwd, ENV))


def listing(folder):  # (a run's log.jsonl aside: appended a line at a time, never half a line)
    return sorted(name for name in os.listdir(folder) if name != 'log.jsonl')


def shakespeare(d, n=80):  # a mirror holding a small tinyshakespeare
    src = d / 'mirror' / 'raw.githubusercontent.com' / SHAKESPEARE
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(''.join(f"CITIZEN {i}:\nWe are accounted poor citizens, the patricians good.\n\n" for i in range(n)))


# ---------------------------------------------------------------- the disk refuses a write
@work
def a_file_size_limit_during_a_checkpoint_save(d):
    before = copy_run(trained_run(d), d)
    r = limited(d, len(before) // 2, 'train.py', *TINY, '--init_from=resume', '--max_iters=3', '--eval_interval=3')
    return r, before, (d / 'out' / 'ckpt.pt').read_bytes(), listing(d / 'out')


def test_a_file_size_limit_during_a_checkpoint_save(job):
    """torch's zip writer turns the failed write into RuntimeError('... unexpected pos'): it used to be a traceback."""
    r, before, after, names = job
    one_line_error(r, 'cannot write out/ckpt.pt (at iter 3)', 'File too large', 'left as it was')
    assert after == before and names == ['ckpt.pt']  # no partial .tmp, no lock left


@work
def a_file_size_limit_during_an_eval_over_its_report(d):
    copy_run(trained_run(d), d)
    ok(run(d, *EVAL))
    before = (d / 'out' / 'eval.json').read_bytes()
    r = limited(d, len(before) // 2, *EVAL, '--html=out/map.html')
    return r, before, (d / 'out' / 'eval.json').read_bytes(), listing(d / 'out')


def test_a_file_size_limit_during_an_eval_over_its_report(job):
    """It used to truncate the previous report into invalid JSON."""
    r, before, after, names = job
    one_line_error(r, 'cannot write out/eval.json', 'File too large', 'left as it was')
    assert after == before and json.loads(after) and names == ['ckpt.pt', 'eval.json']


@work
def a_file_size_limit_during_a_prepare(d):
    shakespeare(d)
    args = ('prepare.py', '--dataset=shakespeare', '--tokenizer=byte', '--mirror=mirror', '--eval_docs=6')
    ok(run(d, *args))
    data = d / 'data' / 'shakespeare_byte'
    before = {name: (data / name).read_bytes() for name in listing(data)}
    r = limited(d, len(before['train.bin']) // 2, *args)
    return r, before, {name: (data / name).read_bytes() for name in listing(data)}, listing(d / 'data')


def test_a_file_size_limit_during_a_prepare(job):
    """It used to print 'wrote ...' and then a traceback."""
    r, before, after, names = job
    one_line_error(r, 'cannot write data/shakespeare_byte/train.bin: File too large', 'left as it was')
    assert after == before and names == ['shakespeare_byte']  # the old folder, whole; nothing half-made


# ---------------------------------------------------------------- a stdout that fails: /dev/full, an ASCII terminal
def fresh_python(d, script, *args, env=(), stdout=subprocess.PIPE):
    """`python script args` as a user starts it: a new interpreter (a fork of the server would keep the server's
    stdout, its encoding and buffering), stdout block-buffered as it is for a file."""
    env = {k: v for k, v in {**ENV, **dict(env)}.items() if k != 'PYTHONUNBUFFERED'}
    return subprocess.run([sys.executable, str(REPO / script), *map(str, args)], cwd=d, env=env, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=PATIENCE)


@work
def a_stdout_that_fails_is_one_line(d):
    copy_run(trained_run(d), d)
    (d / 'prompt.txt').write_text('Caf\u00e9 ', encoding='utf-8')
    with open('/dev/full', 'w') as full:  # every write to it fails: No space left on device
        train = fresh_python(d, 'train.py', *TINY, stdout=full, env={'NANOLOOP_ARGS_ONLY': '1'})
        ev = fresh_python(d, *EVAL, stdout=full)
    sample = fresh_python(d, *SAMPLE, '--start=FILE:prompt.txt', env={'PYTHONIOENCODING': 'ascii'})
    return train, ev, sample, listing(d / 'out')


def test_a_stdout_that_fails_is_one_line(job):
    """`python train.py ... > /dev/full` used to end in an OSError traceback at the first 'Overriding:' line (or,
    buffered, 'Exception ignored' and status 120); a prompt that an ASCII stdout cannot show, in a
    UnicodeEncodeError traceback."""
    train, ev, sample, names = job
    for r in (train, ev):
        one_line_error(r, 'cannot use stdout: No space left on device', '> FILE')
    one_line_error(sample, "stdout's encoding, ascii, has no character U+00E9", 'PYTHONIOENCODING=utf-8')
    assert names == ['ckpt.pt']  # eval stopped at its first line: no report written


# ---------------------------------------------------------------- shell habits: a closed pipe, Ctrl-C
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
    copy_run(trained_run(d), d)  # (no arguments, so no 'Overriding' lines: a sample or the report is first)
    return reader_gone(d, 'sample.py'), reader_gone(d, 'eval.py'), (d / 'out' / 'eval.json').read_text()


def test_a_closed_pipe_ends_quietly(job):
    """`python sample.py ... | head -1`, `python eval.py ... | head` used to end in BrokenPipeError tracebacks,
    and eval's work was lost: now its report is written before it is shown."""
    sample, ev, report = job
    for r in (sample, ev):
        assert r.returncode == 1, r.stderr  # it met the closed pipe (without it: 0)
        assert 'Traceback' not in r.stderr and 'rror' not in r.stderr, r.stderr
    assert 'suffix_nll' in json.loads(report)


def train_in_a_pipe(d, ctrl_c):
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
    return r, said, saved and load(d / 'out' / 'ckpt.pt'), saved and listing(d / 'out')


@work
def a_closed_pipe_saves_the_training_run(d, ctrl_c):
    return train_in_a_pipe(d, ctrl_c)


@pytest.mark.parametrize('ctrl_c', [False, True])
def test_a_closed_pipe_saves_the_training_run(job, ctrl_c):
    """`python train.py config/smoke.py | head -3` used to end without saving what it had trained: a closed
    stdout now asks to stop as a closed terminal does (the step finishes, the run saves), and ends as SIGPIPE
    would (141); after Ctrl-C, a pipe that closes too is not a second request (which would stop at once)."""
    r, said, ckpt, names = job
    assert r.returncode == (130 if ctrl_c else 141) and r.stderr == '', r.stderr
    assert ckpt and 1 <= ckpt['iter_num'] < 100000, said  # saved what it had said it trained, and stopped
    assert names == ['ckpt.pt']  # the lock gone, no partial file


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
    copy_run(trained_run(d), d)
    return (interrupted(d, (*SAMPLE, '--max_new_tokens=1000000')),
            interrupted(d, (*EVAL, '--eval_iters=100000')), listing(d / 'out'))


def test_ctrl_c_is_one_line(job):
    *runs, names = job
    for r, err in runs:
        assert r.returncode == -signal.SIGINT and 'Traceback' not in err, err  # as python ends on SIGINT
        assert err.strip().splitlines()[-1] == 'stopped (Ctrl-C)', err
    assert names == ['ckpt.pt']  # eval wrote nothing half-way


# ---------------------------------------------------------------- a file damaged in place, or not a file
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
    copy_run(trained_run(d), d)
    overwrite_a_tensor(d / 'out' / 'ckpt.pt')
    before = (d / 'out' / 'ckpt.pt').read_bytes()
    runs = run_all((d, *SAMPLE), (d, *EVAL), (d, 'train.py', *TINY, '--init_from=resume', '--max_iters=4'))
    return runs, before, (d / 'out' / 'ckpt.pt').read_bytes(), listing(d / 'out')


def test_a_checkpoint_damaged_in_place(job):
    """It used to load without a word: sampling died in torch.multinomial, eval wrote NaN into eval.json."""
    runs, before, after, names = job
    for r in runs:
        one_line_error(r, 'out/ckpt.pt is damaged', 'checksum')
    assert after == before and names == ['ckpt.pt']


@work
def a_fifo_where_a_file_belongs(d):
    copy_run(trained_run(d), d)
    (d / 'data' / 'tiny' / 'val.bin').unlink()
    os.mkfifo(d / 'data' / 'tiny' / 'val.bin')  # (reading it would wait for a writer forever)
    os.mkfifo(d / 'prompt')
    threading.Thread(target=lambda: (d / 'prompt').write_text('ROMEO:'), daemon=True).start()
    return run(d, *EVAL), run(d, *SAMPLE, '--start=FILE:prompt')


def test_a_fifo_where_a_file_belongs(job):
    """val.bin as a FIFO used to hang; a prompt from a pipe (FILE:/dev/stdin) was 'not found'."""
    ev, sample = job
    one_line_error(ev, 'data/tiny/val.bin is not a file')
    assert ok(sample).startswith('ROMEO:') or '\nROMEO:' in sample.stdout


@work
def a_fifo_in_the_downloads(d):
    """A FIFO where prepare.py reads a download: in --mirror, and in its cache (data/downloads)."""
    shakespeare(d)
    mirrored = d / 'mirror' / 'raw.githubusercontent.com' / SHAKESPEARE
    cached = d / 'data' / 'downloads' / mirrored.relative_to(d / 'mirror')
    cached.parent.mkdir(parents=True)
    os.mkfifo(cached)  # (reading it would wait for a writer forever; it used to be taken as missing)
    mirrored.unlink()
    os.mkfifo(mirrored)
    args = ('prepare.py', '--dataset=shakespeare', '--tokenizer=byte', '--eval_docs=6')
    return run(d, *args, '--mirror=mirror'), run(d, *args, '--base_url=http://127.0.0.1:9'), listing(d / 'data')


def test_a_fifo_in_the_downloads(job):
    from_mirror, from_cache, names = job
    for r, folder in ((from_mirror, 'mirror'), (from_cache, 'data/downloads')):
        one_line_error(r, f'{folder}/raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt'
                       ' is not a regular file', 'delete it')
    assert names == ['downloads']  # nothing made; no download tried


# ---------------------------------------------------------------- config files are Python, as nanoGPT's
CONFIGS = {  # name: (its text, the words of its one error line, or None: it runs)
    'imports_and_helpers': ('from math import sqrt, pi\nimport os\n\ndef half(x):\n    return x // 2\n\n'
                            'batch_size = half(8)  # 4\nlearning_rate = sqrt(1e-6)\n', None),
    'an_unknown_setting': ('learnin_rate = 1e-3\n', ['unknown config key learnin_rate', 'learning_rate']),
    'sys_exit': ('import sys\nbatch_size = 3\nsys.exit(0)\n', ['line 3', 'sys.exit']),
}


@pytest.mark.parametrize('name', [*CONFIGS, 'json'])
def test_a_config_file_is_python(name, tmp_path):
    text, words = CONFIGS.get(name, ('{"batch_size": 4}\n', ['not a .py file']))
    path = tmp_path / ('c.json' if name == 'json' else 'c.py')
    path.write_text(text)
    r = run(tmp_path, 'train.py', path, '--max_iters=1', env={**ENV, 'NANOLOOP_ARGS_ONLY': '1'})
    if words:
        one_line_error(r, *words)
    else:
        assert ok(r) and r.stderr == ''
