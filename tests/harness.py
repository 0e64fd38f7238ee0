"""Shared by the tests that run the scripts: tiny byte-level data, a trained and an untrained tiny model, running
scripts as processes (or here, as `python SCRIPT ARGS` would), one-line-error checks, and the seatbelt tests' tables
of cases (a folder, a change to it, a command, the words of its one error line). A script runs in a process of its
own, forked from a server that imported torch once (forkserver.py: a fresh `python` would spend ~4 s of CPU on the
import alone); a test's runs go in a `@work` function that its module starts in the background (a few threads, in
test order) as soon as the first test asks; the test itself then only waits for its own results and asserts."""
import json, os, random, re, runpy, shlex, shutil, socket, subprocess, sys, threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

import guards
from forkserver import Server
from model import GPT, GPTConfig
from prepare import SHAKESPEARE

REPO = Path(__file__).resolve().parents[1]
PATIENCE = 900  # seconds a run may take before a test calls it hung: 100x what any takes on an idle machine,
# so that no load fails a test (a bound, never a measure: tests assert events and state, not durations)
ENV = {**os.environ, 'OMP_NUM_THREADS': '1', 'PYTHONUNBUFFERED': '1'}
TINY = ['--dataset=tiny', '--n_embd=32', '--n_head=2', '--n_prelude=1', '--loops=(2,)', '--n_coda=1', '--block_size=32',
        '--batch_size=4', '--eval_iters=2', '--log_interval=1', '--device=cpu', '--warmup_iters=2', '--lr_decay_iters=100']
META = {'tokenizer': 'byte', 'vocab_size': 257, 'eot': 256, 'dtype': 'uint16'}
WORDS = ("the of and to in is was that for on with as by at from his her this which or had not but are be they one all "
         "we their there when an she more so were if would them about what out up into some time could no first").split()


def make_data(root, name='tiny', n_docs=300):
    """data/<name>/ in prepare.py's format: byte tokens, EOT=256 after every document."""
    rng = random.Random(0)
    docs = [' '.join(rng.choice(WORDS) for _ in range(rng.randint(10, 60))).capitalize() + '.' for _ in range(n_docs)]
    ids = lambda ds: np.array([t for d in ds for t in list(d.encode()) + [256]], np.uint16)
    d = Path(root, 'data', name)
    d.mkdir(parents=True, exist_ok=True)
    ids(docs[:-30]).tofile(d / 'train.bin')
    ids(docs[-30:]).tofile(d / 'val.bin')
    (d / 'meta.json').write_text(json.dumps(META))
    (d / 'eval.jsonl').write_text(''.join(json.dumps({'topic': 'words', 'text': t}) + '\n' for t in docs[:3]))
    return d


SERVER = Server('import torch, torch.distributed, torch.nn.parallel, numpy, model, prepare, eval')


_trained = threading.Lock()


def trained_run(d):
    """A folder with data/tiny and out/ckpt.pt of a 2-iteration TINY run, trained once a session (beside d, by
    the first test that asks): tests that only need some trained run copy it (copy_run), never retrain it."""
    root = d.parent / 'trained_run'
    with _trained:
        if not (root / 'out' / 'ckpt.pt').exists():
            make_data(root)
            ok(run(root, 'train.py', *TINY, '--max_iters=2', '--eval_interval=2'))
    return root


def copy_run(src, dst, out='out'):
    """dst/data and dst/<out> as copies of src's data and out -> the bytes of the checkpoint."""
    shutil.copytree(src / 'data', dst / 'data', dirs_exist_ok=True)
    shutil.copytree(src / 'out', dst / out)
    return (dst / out / 'ckpt.pt').read_bytes()


def trained(d):
    """d/data/tiny and d/out of the 2-iteration TINY run (trained_run's copy)."""
    copy_run(trained_run(d), d)


def save_model(path, dataset='topics_byte', **kw):
    """path/ckpt.pt: an untrained tiny model saved as train.py saves one (float32, block_size 32)."""
    cfg = GPTConfig(**{**dict(block_size=32, vocab_size=257, n_embd=16, n_head=2, n_prelude=1, loops=(2,),
                              n_coda=1), **kw})
    torch.manual_seed(0)
    path.mkdir(parents=True, exist_ok=True)
    torch.save(dict(model=GPT(cfg).state_dict(), model_args=asdict(cfg), iter_num=0, best_val_loss=9.0,
                    optimizer={}, meta=META, config=dict(dataset=dataset, block_size=32, dtype='float32')),
               path / 'ckpt.pt')


_untrained = threading.Lock()


def untrained(d):
    """d/data/topics_byte (as prepare.py --dataset=topics --tokenizer=byte would write it) and d/out/ckpt.pt
    (save_model's), copied from a folder made once a session (beside d)."""
    root = d.parent / 'untrained'
    with _untrained:
        if not (root / 'out' / 'ckpt.pt').exists():
            make_data(root, 'topics_byte')
            save_model(root / 'out')
    shutil.copytree(root, d, dirs_exist_ok=True)
    return d


@pytest.fixture
def here(tmp_path, monkeypatch):
    """tmp_path as the working directory, with data/topics_byte and out/ckpt.pt (untrained)."""
    monkeypatch.chdir(untrained(tmp_path))
    return tmp_path


def shakespeare(d, n=80):
    """d/mirror, holding a small tinyshakespeare (prepare.py --mirror=mirror reads it)."""
    src = d / 'mirror' / 'raw.githubusercontent.com' / SHAKESPEARE
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(''.join(f"CITIZEN {i}:\nWe are accounted poor citizens, the patricians good.\n\n" for i in range(n)))


def files(d):
    """Everything under d -> its bytes (a folder: None): what a failed run must leave as it was."""
    return {str(p.relative_to(d)): p.read_bytes() if p.is_file() else None for p in sorted(Path(d).rglob('*'))}


def names(folder):
    """The names in folder, but a run's log.jsonl (appended a line at a time, never half a line)."""
    return sorted(name for name in os.listdir(folder) if name != 'log.jsonl')


def edit(name, data, under='data/topics_byte'):
    """A case's change: (over)write a file of data/topics_byte, or of the folder itself (under='.')."""
    return lambda d: (d / under / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def edit_ckpt(d, change):
    """change(the checkpoint d/out/ckpt.pt), saved again."""
    ckpt = torch.load(d / 'out' / 'ckpt.pt', weights_only=True)
    change(ckpt)
    torch.save(ckpt, d / 'out' / 'ckpt.pt')


STARTED = []  # the runs started; when a module's tests end, those still running are killed (kill_leftovers)


def start(cwd, script, *args, env=None, launcher=(), stdout=subprocess.PIPE, stderr=subprocess.PIPE):
    """`python [launcher] script args` in cwd -> a Popen (text) or what answers as one. Forked from SERVER,
    but for a launcher of its own (python -m torch.distributed.run: the launcher is what is tested)."""
    argv = [*launcher, str(REPO / script), *map(str, args)]
    if launcher[:1] == ('-m',):
        p = subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env or ENV, stdout=stdout, stderr=stderr,
                             text=True)
    else:
        p = SERVER.start(argv, cwd, env or ENV, stdout=stdout, stderr=stderr)
    STARTED.append(p)
    return p


def kill_leftovers():
    """Kill the runs still running: those of a test that failed half-way (a run of 100000 iterations that
    it meant to stop), which would take the CPU from the tests after it."""
    while STARTED:
        p = STARTED.pop()
        if p.poll() is None:
            p.kill()


def finish(p, timeout=PATIENCE):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError(f"{p.args} timed out\n{out}\n{err}")
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def run(cwd, script, *args, **kw):
    return finish(start(cwd, script, *args, **kw))


def master_port():
    """A free port for a DDP rendezvous, below the kernel's ephemeral ports (32768 on, which port 0 draws
    from). A port that port 0 gave out and that was closed again can go to another test's HTTP server, or to
    gloo's own sockets, before rank 0 binds it: rank 0 then fails and rank 1 waits for a rendezvous that never
    comes (it once took the whole suite's 15-minute patience)."""
    draw = random.Random()  # (not the global one: a test may have seeded it)
    while True:
        port = draw.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(('127.0.0.1', port))
            except OSError:  # taken: draw again
                continue
        return port


def ddp_ranks(cwd, *args):
    """train.py args as 2 gloo ranks, with the environment torchrun gives them -> [rank 0's result, rank 1's].
    Rank 0 failed: rank 1 is stopped at once, not left waiting for it."""
    env = {**ENV, 'WORLD_SIZE': '2', 'LOCAL_WORLD_SIZE': '2', 'MASTER_ADDR': '127.0.0.1',
           'MASTER_PORT': str(master_port())}
    ranks = [start(cwd, 'train.py', *args, env={**env, 'RANK': str(r), 'LOCAL_RANK': str(r)}) for r in (0, 1)]
    rank0 = finish(ranks[0])
    if rank0.returncode:
        ranks[1].kill()
    return [rank0, finish(ranks[1])]


def run_all(*jobs):
    """(cwd, script, *args) jobs, all at once -> their results."""
    return [finish(p) for p in [start(*job) for job in jobs]]


def ok(r):
    assert r.returncode == 0, f"{r.args}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


def told(err):
    """stderr's lines but the 'Overriding: ...' ones (a script says what it was given there)."""
    return [line for line in err.strip().splitlines() if not line.startswith('Overriding')]


def one_line_error(r, *words):
    """Failed, no traceback, exactly one 'error: ...' line in stderr, containing every word."""
    assert r.returncode != 0, f"{r.args} should fail\n{r.stdout}\n{r.stderr}"
    assert 'Traceback' not in r.stderr, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith('error:')]
    assert len(errors) == 1, f"want one 'error:' line in stderr, got:\n{r.stderr}"
    for w in words:
        assert w.lower() in errors[0].lower(), f"{w!r} not in {errors[0]!r}"
    return errors[0]


LIMITED = """import resource, runpy, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]),) * 2)
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name='__main__')"""


def limited(cwd, limit, script, *args):
    """`python script args` in cwd, no file of it larger than limit bytes (a disk that refuses a write)."""
    return finish(SERVER.start(['-c', LIMITED, str(limit), str(REPO / script), *map(str, args)], cwd, ENV))


# ---------------------------------------------------------------- the seatbelt tests' tables of cases
SAMPLE = ('sample.py', '--device=cpu', '--max_new_tokens=2', '--num_samples=1')
EVAL = ('eval.py', '--device=cpu', '--eval_iters=1', '--batch_size=4')
TRAIN = ('train.py', '--dataset=topics_byte', '--n_embd=16', '--n_head=2', '--n_prelude=1', '--loops=(2,)',
         '--n_coda=1', '--block_size=32', '--batch_size=2', '--max_iters=1', '--device=cpu')  # on untrained's data


def on(base, table):
    """{name: (change(folder) or None, script and args, words)} -> each case with the folder it starts from:
    base(folder), untrained or trained."""
    return {name: (base, *case) for name, case in table.items()}


def refused_run(d, base, change, cmd):
    """A case, as a process: base(d), change(d), cmd in d -> (its result, what d held before, after)."""
    base(d)
    if change:
        change(d)
    before = files(d)
    return run(d, *cmd), before, files(d)


def refused(job, words):
    """refused_run's result: one line with every word; nothing made, changed or lost, no checkpoint saved."""
    r, before, after = job
    one_line_error(r, *words)
    assert after == before, 'a failing run changed what its folder held'
    assert 'saved checkpoint' not in r.stdout


def script(name, *args, monkeypatch, capsys):
    """Run a script here as `python name args` would -> (its one error line or None, its stdout)."""
    monkeypatch.setattr(sys, 'argv', [name, *args])
    monkeypatch.setattr(sys, 'excepthook', sys.excepthook)  # configurator.py sets its own: undo it
    try:
        runpy.run_path(str(REPO / name), run_name='__main__')
    except SystemExit as e:  # (a script that ends early on purpose)
        assert not e.code
    except Exception as e:  # what the entry handler prints for it: one line (else a bug's traceback)
        out = capsys.readouterr().out
        guards.excepthook(type(e), e, e.__traceback__)
        error = capsys.readouterr().err.strip()
        assert error.startswith('error: ') and '\n' not in error, error
        return error, out
    said = capsys.readouterr()
    script.err = said.err  # (what it said on stderr: 'Overriding: ...', the precision)
    return None, said.out


def fails(result, *words):
    error, _ = result
    assert error, 'it should have failed'
    for w in words:
        assert w in error, f"{w!r} not in {error!r}"
    return error


def refused_here(here, change, args, words, monkeypatch, capsys):
    """A case, run here (script): one line in the option's own syntax with every word, nothing made or lost;
    an example it gives (e.g. ...) is a valid one: it gets past this error."""
    if change:
        change(here)
    before = files(here)
    error = fails(script(*args, monkeypatch=monkeypatch, capsys=capsys), *words)
    assert files(here) == before  # nothing made, nothing lost
    if 'e.g.' in error:
        example = shlex.split(error.split('e.g. ')[-1])
        keys = {a.partition('=')[0] for a in example}
        fixed = [a for a in args if a.partition('=')[0] not in keys] + example
        again = script(*fixed, monkeypatch=monkeypatch, capsys=capsys)[0] or 'worked: x'
        assert again.split(': ')[2:] != error.split(': ')[2:]  # not the same problem again


@contextmanager
def read_only_folder(path, files=None):
    """path, a new folder holding files ({name: bytes}) that nobody may write to: a read-only tmpfs mounted there
    (root, who may write to any folder whatever its mode), or mode 555; skips the test where neither works."""
    path.mkdir()
    root = os.geteuid() == 0
    mount = lambda *args: subprocess.run(['mount', *args], capture_output=True).returncode == 0
    if root and not mount('-t', 'tmpfs', 'tmpfs', str(path)):
        pytest.skip('no read-only folder here: root, and mount is not allowed')
    for name, data in (files or {}).items():
        (path / name).write_bytes(data)
    if root:
        assert mount('-o', 'remount,ro', str(path))
    else:
        path.chmod(0o555)
    try:
        yield path
    finally:
        if root:
            subprocess.run(['umount', str(path)])
        else:
            path.chmod(0o755)


def losses(out):
    """{iteration: logged training loss}"""
    return {int(i): float(v) for i, v in re.findall(r'^iter (\d+): loss (\S+?),', out, re.M)}


def log_lines(out):
    return [line for line in out.splitlines() if re.match(r'iter \d+: loss ', line)]


def load(path):
    return torch.load(path, weights_only=True)


WORK = {}  # (module, test name) -> its background work: f(folder, **test params) -> what the test checks


def work(fn):
    WORK[fn.__module__, 'test_' + fn.__name__] = fn
    return fn


class Jobs:
    """The background work of this module's selected tests, started in test order on 3 threads."""
    def __init__(self, module, items, tmp_path_factory):
        self.module, self.tmp, self.pool, self.futures = module.__name__, tmp_path_factory, ThreadPoolExecutor(3), {}
        for item in items:
            if getattr(item, 'module', None) is module and (module.__name__, getattr(item, 'originalname', None)) in WORK:
                self.submit(item.name, item.originalname, item.callspec.params if hasattr(item, 'callspec') else {})

    def submit(self, name, test, params):
        folder = self.tmp.mktemp(re.sub(r'\W+', '_', name)[:60])
        self.futures[name] = self.pool.submit(WORK[self.module, test], folder, **params)

    def __getitem__(self, name):  # a test's results; a plain test's work starts here if it was not selected
        if name not in self.futures:
            self.submit(name, name, {})
        return self.futures[name].result()


@pytest.fixture(scope='module')
def jobs(request, tmp_path_factory):
    jobs = Jobs(request.module, request.session.items, tmp_path_factory)
    yield jobs
    kill_leftovers()  # (the work of a test that failed half-way then ends at once)
    jobs.pool.shutdown(cancel_futures=True)


@pytest.fixture
def job(jobs, request):
    return jobs[request.node.name]
