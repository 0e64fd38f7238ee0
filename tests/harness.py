"""Shared by the tests that run the scripts: tiny byte-level data, running scripts as processes, and one-line-error
checks. A script runs in a process of its own, forked from a server that imported torch once (forkserver.py: a
fresh `python` would spend ~4 s of CPU on the import alone); a test's runs go in a `@work` function that its
module starts in the background (a few threads, in test order) as soon as the first test asks; the test itself
then only waits for its own results and asserts."""
import json, os, random, re, shutil, socket, subprocess, sys, threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

from forkserver import Server

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


def one_line_error(r, *words):
    """Failed, no traceback, exactly one 'error: ...' line in stderr, containing every word."""
    assert r.returncode != 0, f"{r.args} should fail\n{r.stdout}\n{r.stderr}"
    assert 'Traceback' not in r.stderr, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith('error:')]
    assert len(errors) == 1, f"want one 'error:' line in stderr, got:\n{r.stderr}"
    for w in words:
        assert w.lower() in errors[0].lower(), f"{w!r} not in {errors[0]!r}"
    return errors[0]


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
