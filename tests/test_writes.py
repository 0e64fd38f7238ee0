"""Every file a script writes, and its stdout: one atomic write (guards.saving: a temporary file of the run beside
the file, fsynced, renamed onto it; through a link, its target, the link kept; a device or a FIFO written in
place), each output probed before any work (check_output). A full disk (a file-size limit, SIGXFSZ ignored), a
read-only folder, a file where a folder belongs, a folder where a file belongs, a stdout that fails (/dev/full, an
ASCII terminal): each one line `cannot write ...` with the fix, and what was there left as it was, whole."""
import json, os, stat, subprocess, sys, threading

import pytest

import prepare
from harness import *  # noqa: F401,F403  (helpers, tables' runners and the jobs/job/here fixtures)
from guards import InputError

# ---------------------------------------------------------------- an output that cannot be written, as a process
BAD = {  # name: (the folder it starts from, its change or None, script and args, words the one line must contain)
    **on(untrained, {
        'eval_html_is_a_folder': (None, (*EVAL, '--html=data'), ['cannot write data', 'Is a directory', '--html']),
        'eval_html_under_a_file': (None, (*EVAL, '--html=data/topics_byte/meta.json/depth.html'),
                                   ['File exists (data/topics_byte/meta.json)', '--html']),
        'prepare_data_root_a_file': (edit('afile', '', under='.'), ('prepare.py', '--tokenizer=byte', '--data_root=afile'),
                                     ['cannot write afile: File exists', '--data_root'])}),
    **on(trained, {
        'out_dir_is_a_file': (lambda d: (d / 'afile').write_text('mine'), ('train.py', *TINY, '--out_dir=afile'),
                              ['cannot write afile: File exists', '--out_dir'])})}


@work
def an_output_that_cannot_be_written_is_one_line(d, case):
    return refused_run(d, *BAD[case][:3])


@pytest.mark.parametrize('case', BAD)
def test_an_output_that_cannot_be_written_is_one_line(job, case):
    refused(job, BAD[case][3])


# ---------------------------------------------------------------- the disk refuses a write
@work
def a_file_size_limit_during_a_checkpoint_save(d):
    before = copy_run(trained_run(d), d)
    r = limited(d, len(before) // 2, 'train.py', *TINY, '--init_from=resume', '--max_iters=3', '--eval_interval=3')
    return r, before, (d / 'out' / 'ckpt.pt').read_bytes(), names(d / 'out')


def test_a_file_size_limit_during_a_checkpoint_save(job):
    """torch's zip writer turns the failed write into RuntimeError('... unexpected pos'): it used to be a traceback."""
    r, before, after, listed = job
    one_line_error(r, 'cannot write out/ckpt.pt (at iter 3)', 'File too large', 'left as it was')
    assert after == before and listed == ['ckpt.pt']  # no partial .tmp, no lock left


@work
def a_file_size_limit_during_an_eval_over_its_report(d):
    trained(d)
    ok(run(d, *EVAL))
    before = (d / 'out' / 'eval.json').read_bytes()
    r = limited(d, len(before) // 2, *EVAL, '--html=out/map.html')
    return r, before, (d / 'out' / 'eval.json').read_bytes(), names(d / 'out')


def test_a_file_size_limit_during_an_eval_over_its_report(job):
    """It used to truncate the previous report into invalid JSON."""
    r, before, after, listed = job
    one_line_error(r, 'cannot write out/eval.json', 'File too large', 'left as it was')
    assert after == before and json.loads(after) and listed == ['ckpt.pt', 'eval.json']


@work
def a_file_size_limit_during_a_prepare(d):
    shakespeare(d)
    args = ('prepare.py', '--dataset=shakespeare', '--tokenizer=byte', '--mirror=mirror', '--eval_docs=6')
    ok(run(d, *args))
    data = d / 'data' / 'shakespeare_byte'
    before = {name: (data / name).read_bytes() for name in names(data)}
    r = limited(d, len(before['train.bin']) // 2, *args)
    return r, before, {name: (data / name).read_bytes() for name in names(data)}, names(d / 'data')


def test_a_file_size_limit_during_a_prepare(job):
    """It used to print 'wrote ...' and then a traceback."""
    r, before, after, listed = job
    one_line_error(r, 'cannot write data/shakespeare_byte/train.bin: File too large', 'left as it was')
    assert after == before and listed == ['shakespeare_byte']  # the old folder, whole; nothing half-made


# ---------------------------------------------------------------- a stdout that fails: /dev/full, an ASCII terminal
def fresh_python(d, script, *args, env=(), stdout=subprocess.PIPE):
    """`python script args` as a user starts it: a new interpreter (a fork of the server would keep the server's
    stdout, its encoding and buffering), stdout block-buffered as it is for a file."""
    env = {k: v for k, v in {**ENV, **dict(env)}.items() if k != 'PYTHONUNBUFFERED'}
    return subprocess.run([sys.executable, str(REPO / script), *map(str, args)], cwd=d, env=env, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=PATIENCE)


@work
def a_stdout_that_fails_is_one_line(d):
    trained(d)
    (d / 'prompt.txt').write_text('Caf\u00e9 ', encoding='utf-8')
    with open('/dev/full', 'w') as full:  # every write to it fails: No space left on device
        train = fresh_python(d, 'train.py', *TINY, '--max_iters=1', '--out_dir=full', stdout=full)
        ev = fresh_python(d, *EVAL, stdout=full)
    sample = fresh_python(d, *SAMPLE, '--start=FILE:prompt.txt', env={'PYTHONIOENCODING': 'ascii'})
    return train, ev, sample, names(d / 'out')


def test_a_stdout_that_fails_is_one_line(job):
    """`python train.py ... > /dev/full` used to end in an OSError traceback at its first line on stdout (or,
    buffered, 'Exception ignored' and status 120); a prompt that an ASCII stdout cannot show, in a
    UnicodeEncodeError traceback."""
    train, ev, sample, listed = job
    for r in (train, ev):
        one_line_error(r, 'cannot use stdout: No space left on device', '> FILE')
    one_line_error(sample, "stdout's encoding, ascii, has no character U+00E9", 'PYTHONIOENCODING=utf-8')
    assert listed == ['ckpt.pt', 'eval.json']  # eval's report, written before its first line on stdout


# ---------------------------------------------------------------- a read-only folder: refused before the work
@work
def save_on_a_read_only_disk_is_refused_before_any_work(d):
    """out/ckpt.pt, a link to a checkpoint in a read-only folder: the save goes beside the link's target, and the
    probe meets the read-only folder before training."""
    before = copy_run(trained_run(d), d)
    with read_only_folder(d / 'ro', {'ckpt.pt': before}):
        (d / 'out' / 'ckpt.pt').unlink()
        os.symlink(d / 'ro' / 'ckpt.pt', d / 'out' / 'ckpt.pt')
        r = run(d, 'train.py', *TINY, '--init_from=resume', '--max_iters=3', '--eval_interval=3')
        return r, before, (d / 'out' / 'ckpt.pt').read_bytes(), names(d / 'out')


def test_save_on_a_read_only_disk_is_refused_before_any_work(job):
    r, before, after, listed = job
    one_line_error(r, 'cannot write', '/ro/ckpt.pt', '--out_dir')  # read-only, or no access
    assert after == before and listed == ['ckpt.pt'] and 'iter 3' not in r.stdout


@work
def read_only_outputs_are_refused_before_the_work(d):
    trained(d)
    with read_only_folder(d / 'ro'):
        return run_all((d, 'train.py', *TINY, '--out_dir=ro'),
                       (d, 'eval.py', '--device=cpu', '--html=ro/depth.html'))


def test_read_only_outputs_are_refused_before_the_work(job):
    train, evaluate = job
    one_line_error(train, 'cannot write ro: ', '--out_dir')  # was an OSError (the OS's words: read-only,
    one_line_error(evaluate, 'cannot write ro/depth.html: ', '--html')  # or no permission); not after
    assert 'iter ' not in train.stdout and 'suffix NLL' not in evaluate.stdout


def test_an_eval_of_a_model_in_a_read_only_folder_says_how_to_copy_it(here, monkeypatch, capsys):
    """eval.py writes eval.json beside the model: a read-only model folder used to get 'give another --out_dir',
    which names another model, not a way out."""
    with read_only_folder(here / 'ro', {'ckpt.pt': (here / 'out' / 'ckpt.pt').read_bytes()}):
        fails(script(*EVAL, '--out_dir=ro', monkeypatch=monkeypatch, capsys=capsys),
              'cannot write ro/eval.json', 'cp -r ro ~/copy', 'give --out_dir=~/copy')


def test_a_reprepare_into_a_folder_it_cannot_write_is_one_line(tmp_path, monkeypatch):
    """data/topics_byte (an earlier prepare's) read-only: it used to be a PermissionError traceback."""
    (tmp_path / 'data').mkdir()
    with read_only_folder(tmp_path / 'data' / 'topics_byte', {'meta.json': json.dumps(META).encode()}) as old:
        monkeypatch.setattr(prepare, 'data_root', str(tmp_path / 'data'))
        monkeypatch.setattr(prepare, 'tokenizer', 'byte')
        with pytest.raises(InputError, match=r'cannot write .*topics_byte: (Read-only file system|Permission '
                                             r'denied) .*probe\.\d+\.tmp.*: give another --data_root'):
            prepare.main()
        assert json.loads((old / 'meta.json').read_text()) == META and os.listdir(old) == ['meta.json']


# ---------------------------------------------------------------- links, devices, FIFOs and one output per model
def test_a_dangling_link_at_out_dir_is_one_line(here, monkeypatch, capsys):
    refused_here(here, lambda d: os.symlink(d / 'nowhere', d / 'out-link'), (*TRAIN, '--out_dir=out-link'),
                 ['cannot write out-link: File exists', '--out_dir'], monkeypatch, capsys)


def test_a_link_at_html_is_kept_and_its_target_gets_the_map(here, monkeypatch, capsys):
    """The map is written beside the link's target and renamed onto it: a link to a file, or to nowhere, stays a
    link (every write used to rename its file onto the link, replacing it)."""
    (here / 'maps').mkdir()
    (here / 'maps' / 'old.html').write_text('old')
    os.symlink(here / 'maps' / 'old.html', here / 'map.html')
    os.symlink(here / 'no' / 'where.html', here / 'nowhere.html')
    for link, target in (('map.html', 'maps/old.html'), ('nowhere.html', 'no/where.html')):
        error, out = script(*EVAL, f'--html={link}', monkeypatch=monkeypatch, capsys=capsys)
        assert error is None and f'wrote out/eval.json and {link}' in out
        assert (here / link).is_symlink() and 'depth map' in (here / target).read_text()
    assert os.listdir(here / 'maps') == ['old.html']  # no temporary file left beside the target


def test_a_device_or_a_fifo_at_html_is_written_through(here, monkeypatch, capsys):
    """--html=a character device (a copy of /dev/null, made with mknod) or a named pipe: written in place, never
    replaced by a regular file (it used to be: /dev/null as root became a file of HTML)."""
    if os.geteuid() != 0:
        pytest.skip('mknod of a character device needs root')
    os.mknod(here / 'null', 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    os.mkfifo(here / 'pipe')
    got = []
    reader = threading.Thread(target=lambda: got.append((here / 'pipe').read_text()), daemon=True)
    reader.start()  # (it waits for the writer, as `cat pipe` in another terminal)
    for name in ('null', 'pipe'):
        error, out = script(*EVAL, f'--html={name}', monkeypatch=monkeypatch, capsys=capsys)
        assert error is None and f'wrote out/eval.json and {name}' in out
    assert stat.S_ISCHR(os.stat(here / 'null').st_mode) and stat.S_ISFIFO(os.stat(here / 'pipe').st_mode)
    reader.join()  # (the pipe was written whole and closed: the reader has its end)
    assert 'depth map' in got[0] and sorted(os.listdir(here)) == ['data', 'null', 'out', 'pipe']


def test_each_model_gets_its_own_depth_map(here, monkeypatch, capsys):
    """eval.py --out_dir=a,b --html=map.html used to write both maps to one file."""
    save_model(here / 'out-b', act=True)
    error, out = script(*EVAL, '--out_dir=out,out-b', '--html=map.html', monkeypatch=monkeypatch, capsys=capsys)
    assert error is None and not (here / 'map.html').exists()
    assert 'wrote out/eval.json and out/map.html' in out and 'wrote out-b/eval.json and out-b/map.html' in out
    assert 'the ACT gate' in (here / 'out-b' / 'map.html').read_text()  # each its own model's
    assert 'the ACT gate' not in (here / 'out' / 'map.html').read_text()
