"""Issue 29: bad input handled by kind, each kind in one place, so that cases nobody listed are handled too, and an
exact resume in every documented form. Every case of the issue, and more of the same kinds, gets one line
`error: ...` in the option's own command-line syntax naming the fix (or works): never a traceback or a silent
change, and nothing the user had is lost.

Where the process boundary is the point (resume, the dtype a script picks, signals, torchrun's ranks) the scripts
run as subprocesses in the background (harness.py's @work); the rest run here, as `python SCRIPT ARGS` would
(runpy), on an untrained tiny checkpoint made by hand: a few ms each."""
import ast, json, os, runpy, shlex, signal, stat, subprocess, sys, threading
from dataclasses import asdict

import numpy as np
import pytest
import torch

import guards
import prepare
from harness import *  # noqa: F401,F403  (helpers and the jobs/job fixtures)
from model import GPT, GPTConfig
from guards import InputError, load_checkpoint

ROW = 33  # the SFT rows of data/sft_byte: block_size 32


def save_model(path, dataset='topics_byte', **kw):
    """An untrained tiny model saved as train.py saves one (float32, block_size 32)."""
    cfg = GPTConfig(**{**dict(block_size=32, vocab_size=257, n_embd=16, n_head=2, n_prelude=1, loops=(2,),
                              n_coda=1), **kw})
    torch.manual_seed(0)
    path.mkdir(parents=True, exist_ok=True)
    torch.save(dict(model=GPT(cfg).state_dict(), model_args=asdict(cfg), iter_num=0, best_val_loss=9.0,
                    optimizer={}, meta=META, config=dict(dataset=dataset, block_size=32, dtype='float32')),
               path / 'ckpt.pt')


def make_sft(root, rows=20):
    d = root / 'data' / 'sft_byte'
    d.mkdir(parents=True)
    data = np.full((rows, ROW), 256, np.uint16)
    data[:, :5] = 97
    data[:15].tofile(d / 'train.bin')
    data[15:].tofile(d / 'val.bin')
    (d / 'meta.json').write_text(json.dumps({**META, 'row': ROW}))
    (d / 'eval.jsonl').write_text(json.dumps({'topic': 'chat', 'text': 'hi', 'answer': 'yo'}) + '\n')
    return d


@pytest.fixture
def here(tmp_path, monkeypatch):
    """tmp_path as the working directory, with data/topics_byte and out/ckpt.pt."""
    make_data(tmp_path, 'topics_byte')
    save_model(tmp_path / 'out')
    monkeypatch.chdir(tmp_path)
    return tmp_path


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
    return None, capsys.readouterr().out


def fails(result, *words):
    error, _ = result
    assert error, 'it should have failed'
    for w in words:
        assert w in error, f"{w!r} not in {error!r}"
    return error


# ---------------------------------------------------------------- options: each checked for this model, in its syntax
SAMPLE = ('sample.py', '--device=cpu', '--max_new_tokens=3', '--num_samples=1')
EVAL = ('eval.py', '--device=cpu', '--eval_iters=1', '--batch_size=4')
TRAIN = ('train.py', '--dataset=topics_byte', '--n_embd=16', '--n_head=2', '--n_prelude=1', '--loops=(2,)',
         '--n_coda=1', '--block_size=32', '--batch_size=2', '--max_iters=1', '--device=cpu')
OPTIONS = {  # name: (setup(folder) or None, script and args, words the error line must contain)
    # the cases
    'sample_exit_at_without_a_loop': (lambda d: save_model(d / 'out', loops=()), (*SAMPLE, '--exit_at=maxprob:0.5'),
                                      ['--exit_at=maxprob:0.5', 'no tied loop', 'drop it']),
    'sample_n_loops_per_segment_on_one': (None, (*SAMPLE, '--n_loops=(4,4)'),
                                          ['n_loops=(4, 4)', 'the model has 1 segments']),  # model.py's
    'eval_exit_kind_on_act': (lambda d: save_model(d / 'out', act=True), (*EVAL, '--exit_kind=resid'),
                              ['--exit_kind=resid', 'ACT gate', 'drop it']),
    'frontier_models_misspelt': (None, ('lab/frontier.py', '--models=singel'),
                                 ['--models=singel', 'no model singel', 'single, multi', 'e.g. --models=']),
    'resume_out_dir_typo': (lambda d: [save_model(d / n) for n in ('out-smoke', 'out-act')],
                            (*TRAIN, '--out_dir=out-smok', '--init_from=resume'), ['--out_dir=out-smoke']),
    'out_dir_a_dangling_link': (lambda d: os.symlink(d / 'nowhere', d / 'out-link'),
                                (*TRAIN, '--out_dir=out-link'), ['cannot write out-link: File exists', '--out_dir']),
    'checkpoint_with_an_unknown_model_arg': (lambda d: edit_ckpt(d, lambda c: c['model_args'].update(n_layer=6)),
                                             SAMPLE, ['out/ckpt.pt', "'n_layer'", 'version']),
    'checkpoint_lacking_a_parameter': (lambda d: edit_ckpt(d, lambda c: c['model'].pop('ln_f.weight')),
                                       SAMPLE, ['out/ckpt.pt', 'ln_f.weight', 'version']),
    # more of the same kinds
    'sample_exit_at_on_act': (lambda d: save_model(d / 'out', act=True), (*SAMPLE, '--exit_at=resid:0.1'),
                              ['--exit_at=resid:0.1', 'the model in out has an ACT gate', 'drop it']),
    'sample_n_loops_on_a_plain_model': (lambda d: save_model(d / 'out', loops=()), (*SAMPLE, '--n_loops=4'),
                                        ['n_loops=4', 'the model has 0 segments']),
    'eval_thresholds_on_act': (lambda d: save_model(d / 'out', act=True), (*EVAL, '--thresholds=0.9'),
                               ["'--thresholds=(0.9,)'", 'ACT gate']),
    'eval_val_shorter_than_a_row': (lambda d: (d / 'data' / 'topics_byte' / 'val.bin').write_bytes(b'\x01\x00' * 10),
                                    EVAL, ['val.bin has 10 tokens', 'too few for block_size 32', '--block_size']),
    'sft_rows_cut_short': (lambda d: (make_sft(d) / 'train.bin').write_bytes(b'\x01\x00' * (ROW * 3 + 5)),
                           (*TRAIN, '--dataset=sft_byte'), ['train.bin', 'not whole rows of 33']),
    'fine_tune_changing_the_architecture': (None, (*TRAIN, '--init_from=out', '--out_dir=ft', '--n_embd=32'),
                                            ['--n_embd=32', '--n_embd=16', 'fine-tuning cannot change']),
    'init_from_typo': (None, (*TRAIN, '--init_from=ot', '--out_dir=ft'), ['no checkpoint at ot/ckpt.pt',
                                                                          '--init_from=out']),
    'loops_not_a_number': (None, (*TRAIN, '--loops=x'), ['--loops=x', 'tuple']),
    'checkpoint_with_a_wrong_shape': (lambda d: edit_ckpt(d, lambda c: c['model'].update(
        {'ln_f.weight': torch.ones(3)})), SAMPLE, ['out/ckpt.pt', 'ln_f.weight', 'shape']),
    'out_dir_the_checkpoint_file': (None, (*SAMPLE, '--out_dir=out/ckpt.pt'),
                                    ['no checkpoint at out/ckpt.pt/ckpt.pt', 'found out/ckpt.pt', '--out_dir=out']),
    'a_batch_larger_than_the_data': (None, (*TRAIN, '--batch_size=99999999'),
                                     ['--batch_size=99999999', 'train.bin holds', 'lower it']),
    'bench_estimate_of_no_config': (None, ('bench.py', '--estimate=v3,v99'),
                                    ['--estimate=v99', 'no config/v99.py', 'e.g. --estimate=v3']),
    'frontier_a_seed_twice': (None, ('lab/frontier.py', '--seeds=(1,1)'),
                              ["'--seeds=(1, 1)'", 'need a tuple of whole numbers, each once', 'e.g.']),
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
    # a run larger than the memory this machine has: refused before the work (it used to allocate until the OS
    # refused, or killed it: exit 137)
    'eval_a_batch_larger_than_the_memory': (None, (*EVAL, '--batch_size=100000000000'),
                                            ['eval.py --batch_size=100000000000 needs about', 'GB, this machine has',
                                             'GB available: try --batch_size=']),
    'train_a_model_larger_than_the_memory': (None, (*TRAIN, '--n_embd=65536', '--out_dir=big'),
                                             ['train.py --batch_size=2 needs about', 'GB, this machine has',
                                              'the model alone needs more']),
    'a_rule_the_defaults_break_gives_no_example': (None, (*TRAIN, '--exit_gate=True'),
                                                   ['--exit_gate=True', 'supervise']),
}


def edit_ckpt(d, change):
    ckpt = torch.load(d / 'out' / 'ckpt.pt', weights_only=True)
    change(ckpt)
    torch.save(ckpt, d / 'out' / 'ckpt.pt')


def resumable(ckpt, **config):
    """ckpt, with an optimizer's state (train.py's, for its model) to resume, and config's settings."""
    model = GPT(GPTConfig(**ckpt['model_args']))
    ckpt.update(optimizer=model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), 'cpu').state_dict())
    ckpt['config'].update(config)


def files(d):
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob('*')) if p.is_file()}


@pytest.mark.parametrize('case', OPTIONS)
def test_an_option_outside_its_domain_is_one_line_in_its_syntax(case, here, monkeypatch, capsys):
    setup, args, words = OPTIONS[case]
    if setup:
        setup(here)
    before = files(here)
    error = fails(script(*args, monkeypatch=monkeypatch, capsys=capsys), *words)
    assert files(here) == before  # nothing made, nothing lost
    if 'e.g.' in error:  # an example given is a valid one: it gets past this error
        example = shlex.split(error.split('e.g. ')[-1])
        keys = {a.partition('=')[0] for a in example}
        fixed = [a for a in args if a.partition('=')[0] not in keys] + example
        again = script(*fixed, monkeypatch=monkeypatch, capsys=capsys)[0] or 'worked: x'
        assert again.split(': ')[2:] != error.split(': ')[2:]  # not the same problem again


def test_a_text_option_takes_the_text_as_typed(here, monkeypatch, capsys):
    """--start=1984 used to answer 'start must be of type str'; --start=(1,2) is text too."""
    for text in ('1984', '(1,2)', 'True'):
        error, out = script(*SAMPLE, f'--start={text}', '--temperature=0', monkeypatch=monkeypatch, capsys=capsys)
        assert error is None and f"Overriding: start = '{text}'" in out and f'\n{text}' in out


def test_a_tuple_option_takes_one_value(here, monkeypatch, capsys):
    """eval.py --thresholds=0.9 used to answer 'must be of type tuple (like ())'."""
    error, out = script(*EVAL, '--thresholds=0.9', monkeypatch=monkeypatch, capsys=capsys)
    assert error is None
    assert [c['threshold'] for c in json.loads((here / 'out' / 'eval.json').read_text())['early_exit']] == [0.9]


def test_a_long_value_is_not_echoed_whole(here, monkeypatch, capsys):
    monkeypatch.setenv('NANOLOOP_ARGS_ONLY', '1')
    _, out = script(*SAMPLE, '--start=' + 'x' * 119_000, monkeypatch=monkeypatch, capsys=capsys)
    line = next(line for line in out.splitlines() if line.startswith('Overriding: start'))
    assert len(line) < 150 and '119,002 characters' in line


def test_a_folder_name_with_a_comma_is_not_split(here, monkeypatch, capsys):
    save_model(here / 'run-lr3e-3,bs16')
    error, out = script(*SAMPLE, '--out_dir=run-lr3e-3,bs16', monkeypatch=monkeypatch, capsys=capsys)
    assert error is None and '===' not in out
    error, out = script(*EVAL, '--out_dir=run-lr3e-3,bs16', monkeypatch=monkeypatch, capsys=capsys)
    assert error is None and (here / 'run-lr3e-3,bs16' / 'eval.json').exists()


def test_each_model_gets_its_own_depth_map(here, monkeypatch, capsys):
    """eval.py --out_dir=a,b --html=map.html used to write both maps to one file."""
    save_model(here / 'out-b', act=True)
    error, out = script(*EVAL, '--out_dir=out,out-b', '--html=map.html', monkeypatch=monkeypatch, capsys=capsys)
    assert error is None and not (here / 'map.html').exists()
    assert 'wrote out/eval.json and out/map.html' in out and 'wrote out-b/eval.json and out-b/map.html' in out
    assert 'the ACT gate' in (here / 'out-b' / 'map.html').read_text()  # each its own model's
    assert 'the ACT gate' not in (here / 'out' / 'map.html').read_text()


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


def test_every_model_is_checked_before_any_work(here, monkeypatch, capsys):
    save_model(here / 'out-act', act=True)
    fails(script(*EVAL, '--out_dir=out,out-act', '--exit_kind=resid', monkeypatch=monkeypatch, capsys=capsys),
          'out-act')
    assert not (here / 'out' / 'eval.json').exists()  # the first was not evaluated either


def test_running_out_of_memory_is_one_line(capsys, monkeypatch):
    """torch's own error for it (CPU: a RuntimeError; CUDA: torch.OutOfMemoryError), through the excepthook."""
    ns = {'__file__': str(REPO / 'script.py'), '__name__': 'script', 'batch_size': 32}
    monkeypatch.setitem(guards.KEYS, 'script.py', ({'batch_size': 'any'}, []))  # a script with one key
    old_hook, old_argv = sys.excepthook, sys.argv
    sys.argv = ['script.py']
    try:
        exec((REPO / 'configurator.py').read_text(), ns)
        for err in (RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                                 "memory: you tried to allocate 140737488355328 bytes. Error code 12"),
                    torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has ...")):
            sys.excepthook(type(err), err, None)
    finally:
        sys.excepthook, sys.argv = old_hook, old_argv
    lines = capsys.readouterr().err.splitlines()
    assert lines == ['error: out of memory: lower --batch_size'] * 2


@pytest.mark.parametrize('kw', [dict(), dict(loops=(3, 5)), dict(supervise=(1, 2, 4)), dict(phantom=True, phantom_steps=2),
                                dict(act=True), dict(loops=())])
def test_the_memory_estimate_follows_what_autograd_keeps(kw):
    """guards.memory's training activations against what autograd keeps for backward, measured as bench.py
    --estimate measures it (each saved storage once, no weights): within a quarter, for every kind of model."""
    c = GPTConfig(**{**dict(block_size=64, vocab_size=2000, n_embd=64, n_head=4, n_prelude=1, loops=(4,), n_coda=1),
                     **kw})
    torch.manual_seed(0)
    model, x = GPT(c), torch.randint(c.vocab_size, (4, c.block_size))
    weights, saved = {p.untyped_storage().data_ptr() for p in model.parameters()}, {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in weights:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x, x)
    estimate = 4 * guards.memory(asdict(c), True)[1]
    assert 0.75 < estimate / sum(saved.values()) < 1.25, (estimate, sum(saved.values()))


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


def test_an_eval_of_a_model_in_a_read_only_folder_says_how_to_copy_it(here, monkeypatch, capsys):
    """eval.py writes eval.json beside the model: a read-only model folder used to get 'give another --out_dir',
    which names another model, not a way out."""
    with read_only_folder(here / 'ro', {'ckpt.pt': (here / 'out' / 'ckpt.pt').read_bytes()}):
        fails(script(*EVAL, '--out_dir=ro', monkeypatch=monkeypatch, capsys=capsys),
              'cannot write ro/eval.json', 'cp -r ro ~/copy', 'give --out_dir=~/copy')


def test_heads_too_narrow_to_learn_are_said(here, monkeypatch, capsys):
    """n_embd / n_head below 8 trains, and learns little: said once, at the start (a note, not a refusal: the
    model is legal, and a test or a sweep may want it)."""
    error, out = script(*TRAIN, '--n_head=4', '--out_dir=narrow', monkeypatch=monkeypatch, capsys=capsys)
    assert error is None and 'note: --n_embd=16 --n_head=4 gives heads of 4 numbers: below 8' in out
    error, out = script(*TRAIN, '--out_dir=wide', monkeypatch=monkeypatch, capsys=capsys)
    assert error is None and 'note:' not in out


def test_a_checkpoint_of_another_version_names_the_keys(tmp_path):
    save_model(tmp_path)
    ckpt = torch.load(tmp_path / 'ckpt.pt', weights_only=True)
    ckpt['model_args']['n_layer'] = 6
    torch.save(ckpt, tmp_path / 'ckpt.pt')
    with pytest.raises(InputError, match="n_layer"):
        load_checkpoint(str(tmp_path / 'ckpt.pt'), GPT.from_checkpoint)


# ---------------------------------------------------------------- data folders: checked; never half-replaced
@pytest.fixture
def old_sft(tmp_path, monkeypatch):
    """data/sft_byte as an earlier prepare.py left it, and prepare's settings for a re-prepare of it."""
    d = make_sft(tmp_path)
    for key, value in dict(dataset='sft', tokenizer='byte', data_root=str(tmp_path / 'data'), block_size=16).items():
        monkeypatch.setattr(prepare, key, value)
    return d


def test_a_prepare_without_held_out_documents_keeps_the_old_data(old_sft, monkeypatch):
    before = files(old_sft)
    monkeypatch.setattr(prepare, 'sft_split', lambda: ([], [('hi', 'yo')] * 20))
    with pytest.raises(InputError, match=r'no held-out documents .*--block_size'):
        prepare.main()
    assert files(old_sft) == before


def test_a_reprepare_into_a_folder_it_cannot_write_is_one_line(tmp_path, monkeypatch):
    """data/topics_byte (an earlier prepare's) read-only: it used to be a PermissionError traceback. (Root may
    write to any folder whatever its mode: for root, a read-only tmpfs mounted there.)"""
    old = tmp_path / 'data' / 'topics_byte'
    old.mkdir(parents=True)
    mounted = []
    if os.geteuid() == 0:
        mount = lambda *args: subprocess.run(['mount', *args], capture_output=True).returncode == 0
        if not mount('-t', 'tmpfs', 'tmpfs', str(old)):
            pytest.skip('no read-only folder here: root, and mount is not allowed')
        mounted.append(old)
        (old / 'meta.json').write_text(json.dumps(META))
        assert mount('-o', 'remount,ro', str(old))
    else:
        (old / 'meta.json').write_text(json.dumps(META))
        old.chmod(0o555)
    try:
        monkeypatch.setattr(prepare, 'data_root', str(tmp_path / 'data'))
        monkeypatch.setattr(prepare, 'tokenizer', 'byte')
        with pytest.raises(InputError, match=r'cannot write .*topics_byte: (Read-only file system|Permission '
                                             r'denied) .*probe\.\d+\.tmp.*: give another --data_root'):
            prepare.main()
        assert json.loads((old / 'meta.json').read_text()) == META and os.listdir(old) == ['meta.json']
    finally:
        for folder in mounted:
            subprocess.run(['umount', str(folder)])
        old.chmod(0o755)


# ---------------------------------------------------------------- resume: every documented form, bitwise
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


# ---------------------------------------------------------------- every way a terminal stops a run
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


# ---------------------------------------------------------------- torchrun: one line, from rank 0, every rank fails
@work
def errors_under_torchrun_print_once(d):
    """Each rank as torchrun starts it (RANK, WORLD_SIZE, ...): bad input stops every rank before any collective,
    and only rank 0 says why."""
    make_data(d)
    env = lambda rank: {**ENV, 'RANK': str(rank), 'LOCAL_RANK': str(rank), 'WORLD_SIZE': '2',
                        'MASTER_ADDR': '127.0.0.1', 'MASTER_PORT': '29599'}
    cases = [('--gradient_accumulation_steps=3',), ('--batch_sze=4',)]
    return [[finish(start(d, 'train.py', *TINY, *case, env=env(rank))) for rank in (0, 1)] for case in cases]


def test_errors_under_torchrun_print_once(job):
    (accum0, accum1), (key0, key1) = job
    one_line_error(accum0, '--gradient_accumulation_steps=3', '2 processes', 'multiple of 2')
    one_line_error(key0, 'unknown config key --batch_sze', 'did you mean --batch_size?')
    for r in (accum1, key1):
        assert r.returncode != 0 and r.stderr == '', r.stderr
