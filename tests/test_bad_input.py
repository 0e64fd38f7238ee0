"""Bad input to sample.py, eval.py and prepare.py (issue 12's catalogue): every numeric knob out of range and every
broken data file gets one line `error: ...` naming the key or the file and the fix, never a traceback or silence,
and a failing run changes nothing in out/ or data/. Plus what used to happen without a word: a long prompt's crop,
a non-UTF-8 line of eval.jsonl, temperature 0.

Speed: a script run is mostly torch's import (~1.5 s of CPU). The cases that need a checkpoint or data files run as
subprocesses in the background (harness.py's @work / jobs) on byte-level data and a hand-made, untrained tiny
checkpoint; a knob out of range stops in configurator.py before anything is read, so those run the script in this
process (runpy: the same code, the same InputError line that python would print), a few ms each."""
import json, os, runpy, shutil, subprocess, sys, threading
from dataclasses import asdict

import numpy as np
import pytest
import torch

import guards
import prepare
from harness import *  # noqa: F401,F403  (helpers and the jobs/job fixtures)
from model import GPT, GPTConfig
from guards import InputError

DATA = 'data/topics_byte'  # as prepare.py --dataset=topics --tokenizer=byte would write it
FIX = 'python prepare.py --dataset=topics --tokenizer=byte'
_base_lock = threading.Lock()


def base(d):
    """d/data/topics_byte and d/out/ckpt.pt (an untrained tiny model, with the keys train.py saves), copied from a
    folder made once, by the first work that asks."""
    root = d.parent / 'base_bad_input'
    with _base_lock:
        if not (root / 'out' / 'ckpt.pt').exists():
            make_data(root, 'topics_byte')
            cfg = GPTConfig(block_size=32, vocab_size=257, n_embd=16, n_head=2, n_prelude=1, loops=(2,), n_coda=1)
            torch.manual_seed(0)
            (root / 'out').mkdir()
            torch.save(dict(model=GPT(cfg).state_dict(), model_args=asdict(cfg), iter_num=0, meta=META,
                            config=dict(dataset='topics_byte', block_size=32)), root / 'out' / 'ckpt.pt')
    for sub in ('data', 'out'):
        shutil.copytree(root / sub, d / sub)
    return d


def files(d):
    """Every file under d/out and d/data -> its bytes."""
    return {str(p.relative_to(d)): p.read_bytes() for sub in ('out', 'data') for p in sorted((d / sub).rglob('*'))
            if p.is_file()}


def edit(name, data, under=DATA):  # a setup: (over)write a file of data/topics_byte, or of the folder itself
    return lambda d: (d / under / name).write_bytes(data if isinstance(data, bytes) else data.encode())


SAMPLE = ('sample.py', '--device=cpu', '--max_new_tokens=2', '--num_samples=1')
EVAL = ('eval.py', '--device=cpu', '--eval_iters=1', '--batch_size=4')
MPS = ['--device=mps', 'not usable', '--device=cpu']
TRAIN = ('train.py', *[a for a in TINY if not a.startswith('--dataset')], '--dataset=topics_byte', '--out_dir=fresh',
         '--max_iters=2')

# ---------------------------------------------------------------- bad files and values that need the data: subprocesses
BAD = {  # name: (setup(folder) or None, script and args, words the one error line must contain)
    'sample_top_p_0': (None, (*SAMPLE, '--top_p=0'), ['top_p=0.0', '0 < top_p <= 1']),  # a rule, end to end
    'sample_prompt_not_utf8': (edit('prompt.txt', b'caf\xe9 \xff\n', under='.'), (*SAMPLE, '--start=FILE:prompt.txt'),
                               ['prompt file prompt.txt', 'not UTF-8']),
    'eval_batch_size_0': (None, (*EVAL, '--batch_size=0'), ['batch_size=0', 'batch_size >= 1']),  # a rule, too
    'eval_jsonl_missing': (lambda d: (d / DATA / 'eval.jsonl').unlink(), EVAL,
                           [f'{DATA}/eval.jsonl', 'not found', FIX]),
    'eval_jsonl_no_usable_docs': (edit('eval.jsonl', '{"topic": "x"}\nnot json\n'), EVAL,
                                  [f'{DATA}/eval.jsonl', 'no usable documents', '2 malformed lines', FIX]),
    'meta_not_json': (edit('meta.json', '{"tokenizer": "byte", '), EVAL, [f'{DATA}/meta.json', 'not a JSON', FIX]),
    'meta_without_dtype': (edit('meta.json', json.dumps({k: v for k, v in META.items() if k != 'dtype'})), EVAL,
                           [f'{DATA}/meta.json', "lacks the key 'dtype'", FIX]),
    'train_bin_odd_size': (edit('train.bin', b'\x01\x00' * 500 + b'\x01'), TRAIN, [f'{DATA}/train.bin', FIX]),
    'val_bin_empty': (edit('val.bin', b''), EVAL, [f'{DATA}/val.bin', 'empty', FIX]),
    'val_bin_ids_beyond_vocab': (edit('val.bin', np.array([65, 66, 300] * 100, np.uint16).tobytes()), EVAL,
                                 [f'{DATA}/val.bin', 'token id 300', 'vocab_size 257', FIX]),
    # issue 23: tracebacks, vague lines and silent mistakes of a new user
    'meta_vocab_size_a_string': (edit('meta.json', json.dumps({**META, 'vocab_size': '257'})), EVAL,
                                 [f'{DATA}/meta.json', "vocab_size '257'", 'vocab_size 257', FIX]),
    'checkpoint_without_meta': (lambda d: strip_checkpoint(d, 'meta'), SAMPLE,
                                ['out/ckpt.pt', "KeyError: 'meta'", 'train.py']),
    'sample_device_mps': (None, (*SAMPLE, '--device=mps'), [*MPS]),
    'eval_device_mps': (None, (*EVAL, '--device=mps'), [*MPS]),
    'sample_out_dir_trailing_comma': (None, (*SAMPLE, '--out_dir=out,'),
                                      ['--out_dir=out,', 'an empty name']),
    'eval_out_dir_trailing_comma': (None, (*EVAL, '--out_dir=out,'),
                                    ['--out_dir=out,', 'an empty name']),
    'eval_dataset_unknown': (None, (*EVAL, '--dataset=nope'),
                             ['data/nope_byte/meta.json', 'topics,shakespeare', 'check --dataset']),
    'eval_html_is_a_folder': (None, (*EVAL, '--html=data'),
                              ['cannot write data', 'Is a directory', '--html']),
    'eval_html_under_a_file': (None, (*EVAL, f'--html={DATA}/meta.json/depth.html'),
                               ['File exists (data/topics_byte/meta.json)', '--html']),
    'sample_start_is_a_folder': (None, (*SAMPLE, '--start=FILE:data'),
                                 ['prompt file data', 'Is a directory']),
    'sample_start_not_utf8': (None, (*SAMPLE, '--start=caf\udce9'),  # the byte 0xe9, in Python
                              ['--start', 'not UTF-8']),
    'sample_exit_at_nan': (None, (*SAMPLE, '--exit_at=maxprob:nan'),
                           ['--exit_at=maxprob:nan', 'T >= 0']),
    'sample_exit_at_resid_-1': (None, (*SAMPLE, '--exit_at=resid:-1'),
                                ['--exit_at=resid:-1', 'T >= 0']),
    'prepare_data_root_a_file': (edit('afile', '', under='.'),
                                 ('prepare.py', '--tokenizer=byte',
                                  '--data_root=afile'),
                                 ['cannot write afile: File exists',
                                  '--data_root']),
}


def strip_checkpoint(d, key):  # out/ckpt.pt without one of its keys (saved by another program)
    ckpt = torch.load(d / 'out' / 'ckpt.pt', weights_only=True)
    del ckpt[key]
    torch.save(ckpt, d / 'out' / 'ckpt.pt')


@work
def bad_input_is_one_line_error(d, case):
    setup, cmd, _ = BAD[case]
    base(d)
    if setup:
        setup(d)
    before = files(d)
    return run(d, *cmd), before, files(d)


@pytest.mark.parametrize('case', BAD)
def test_bad_input_is_one_line_error(job, case):
    r, before, after = job
    one_line_error(r, *BAD[case][2])
    assert after == before, 'a failing run changed out/ or data/'


@work
def long_prompt_is_cropped_with_a_notice(d):
    base(d)
    (d / 'prompt.txt').write_text('the cat sat. ' * 10)  # 130 byte tokens; the model's context is 32
    return run(d, *SAMPLE, '--start=FILE:prompt.txt', '--temperature=0', '--num_samples=2', '--max_new_tokens=8')


def test_long_prompt_is_cropped_with_a_notice(job):
    samples = ok(job).split('---------------\n')
    assert 'the prompt has 130 tokens; keeping the last 32 (block_size)' in job.stderr
    prompt = ('the cat sat. ' * 10)[-32:]  # what the model sees: the last 32 tokens
    first, second = (s[s.index(prompt):] for s in samples[:2])
    assert first == second and len(first) == 32 + 8 + 1  # temperature 0: greedy, the same every time


@work
def non_utf8_line_of_eval_jsonl_is_skipped_and_counted(d):
    base(d)
    good = [json.dumps({'topic': 'words', 'text': t}).encode() for t in ('one two three', 'four five')]
    (d / DATA / 'eval.jsonl').write_bytes(b'\n'.join([good[0], b'{"topic": "words", "text": "caf\xe9"}', good[1]]))
    r = run(d, *EVAL)
    return r, json.loads((d / 'out' / 'eval.json').read_text()) if r.returncode == 0 else {}


def test_non_utf8_line_of_eval_jsonl_is_skipped_and_counted(job):
    r, report = job
    assert 'skipped 1 malformed lines of eval.jsonl' in ok(r)  # it used to be read with '\ufffd' in place
    assert report['skipped_lines'] == 1 and report['eval_docs'] == 2


@work
def sample_shows_a_document_boundary(d):
    """A model that always predicts EOT: its samples must show each boundary, not run on."""
    base(d)
    ckpt = torch.load(d / 'out' / 'ckpt.pt', weights_only=True)
    model = GPT(GPTConfig(**{**ckpt['model_args'], 'bias': True}))
    with torch.no_grad():  # the last state is ln_f's bias, all ones: the logits are wte @ 1
        model.ln_f.weight.zero_(), model.ln_f.bias.fill_(1.0), model.wte.weight.zero_()
        model.wte.weight[256] = 1.0
    ckpt.update(model=model.state_dict(), model_args=asdict(model.config))
    torch.save(ckpt, d / 'out' / 'ckpt.pt')
    args = (*SAMPLE, '--start=hi', '--temperature=0', '--max_new_tokens=2')
    return run(d, *args), run(d, *args, '--show_depth=True')


def test_sample_shows_a_document_boundary(job):
    plain, painted = job
    assert 'hi<|endoftext|><|endoftext|>\n' in ok(plain)  # it printed 'hi' and nothing more
    assert ok(painted).count('<|endoftext|>') == 2


@work
def bench_echoes_its_command_as_typed(d):
    return run(d, 'bench.py', '--device=cpu', '--phantom_ks=(1,)', '--k=1', '--n_embd=16',
               '--n_head=2', '--block_size=8', '--batch_size=1', '--gen_tokens=2',
               '--gen_loops=(1,)', '--repeats=1', '--prompt=ab', '--exit_at=maxprob:0.9')


def test_bench_echoes_its_command_as_typed(job):
    first = next(line for line in ok(job).splitlines() if line.startswith('$ python '))
    assert "'--phantom_ks=(1,)'" in first
    assert subprocess.run(['bash', '-n', '-c', first[2:]]).returncode == 0  # unquoted: bash syntax


# ---------------------------------------------------------------- every knob out of range: stopped by its _valid rule
RULES = {  # name: (script and args, words the one error line must contain)
    'sample_max_new_tokens_0': (('sample.py', '--max_new_tokens=0'), ['max_new_tokens=0', 'max_new_tokens >= 1']),
    'sample_max_new_tokens_-5': (('sample.py', '--max_new_tokens=-5'), ['max_new_tokens=-5', '>= 1']),
    'sample_num_samples_0': (('sample.py', '--num_samples=0'), ['num_samples=0', 'num_samples >= 1']),
    'sample_temperature_-1': (('sample.py', '--temperature=-1'), ['temperature=-1.0', 'temperature >= 0']),
    'sample_top_k_-3': (('sample.py', '--top_k=-3'), ['top_k=-3', 'top_k >= 0']),
    'sample_top_p_1.5': (('sample.py', '--top_p=1.5'), ['top_p=1.5', '0 < top_p <= 1']),
    'sample_repetition_penalty_0': (('sample.py', '--repetition_penalty=0'),
                                    ['repetition_penalty=0.0', '0.01 <= repetition_penalty <= 100']),
    'sample_seed_2**64': (('sample.py', f'--seed={2**64}'), [f'seed={2**64}', 'seed < 2**64']),
    'sample_n_loops_1.5': (('sample.py', '--n_loops=1.5'), ['n_loops=1.5', 'need None, a whole number at least 1, or a tuple of them']),
    'sample_n_loops_x': (('sample.py', '--n_loops=x'), ['--n_loops=x', 'need None, a whole number at least 1, or a tuple of them']),
    'eval_eval_iters_0': (('eval.py', '--eval_iters=0'), ['eval_iters=0', 'eval_iters >= 1']),
    'eval_batch_size_0': (('eval.py', '--batch_size=0'), ['batch_size=0', 'batch_size >= 1']),
    'eval_max_docs_0': (('eval.py', '--max_docs=0'), ['max_docs=0', 'max_docs >= 1']),
    'eval_max_docs_-1': (('eval.py', '--max_docs=-1'), ['max_docs=-1', 'max_docs >= 1']),
    'eval_thresholds_negative': (('eval.py', '--thresholds=(0.5,-1)'), ['thresholds=(0.5, -1)', 'numbers, each at least 0']),
    'eval_thresholds_not_numbers': (('eval.py', "--thresholds=(0.5,'a')"), ['thresholds=(0.5, ', 'numbers, each at least 0']),
    'eval_exit_kind': (('eval.py', '--exit_kind=entropy'), ['--exit_kind=entropy', 'maxprob', 'resid']),
    'prepare_eval_docs_-1': (('prepare.py', '--eval_docs=-1'), ['eval_docs=-1', 'eval_docs >= 1']),
    'prepare_eval_docs_0': (('prepare.py', '--eval_docs=0'), ['eval_docs=0', 'eval_docs >= 1']),
    'prepare_shards_0': (('prepare.py', '--dataset=fineweb', '--shards=0'), ['shards=0', 'shards >= 1']),
    'bench_gen_tokens_1': (('bench.py', '--gen_tokens=1'), ['gen_tokens=1', 'gen_tokens >= 2']),
    'bench_repeats_0': (('bench.py', '--repeats=0'), ['repeats=0', 'repeats >= 1']),
    'bench_phantom_ks_0': (('bench.py', '--phantom_ks=(1,0)'), ['phantom_ks=(1, 0)', 'whole numbers, each at least 1']),
    'train_eval_interval_0': (('train.py', '--eval_interval=0'), ['eval_interval=0', 'eval_interval >= 1']),
    'train_log_interval_0': (('train.py', '--log_interval=0'), ['log_interval=0', 'log_interval >= 1']),
    'train_eval_iters_0': (('train.py', '--eval_iters=0'), ['eval_iters=0', 'eval_iters >= 1']),
    'train_batch_size_0': (('train.py', '--batch_size=0'), ['batch_size=0', 'batch_size >= 1']),
    'train_batch_size_-4': (('train.py', '--batch_size=-4'), ['batch_size=-4', 'batch_size >= 1']),
    'train_block_size_0': (('train.py', '--block_size=0'), ['block_size=0', 'block_size >= 1']),
    'train_grad_accum_0': (('train.py', '--gradient_accumulation_steps=0'), ['gradient_accumulation_steps >= 1']),
    'train_dropout_1.5': (('train.py', '--dropout=1.5'), ['dropout=1.5', '0 <= dropout < 1']),
    'train_out_dir_empty': (('train.py', '--out_dir='), ["out_dir=''", "out_dir != ''"]),
    'train_lr_decay': (('train.py', '--lr_decay_iters=10', '--warmup_iters=10'), ['raise --lr_decay_iters past --warmup_iters']),
    'train_dataset_empty': (('train.py', '--dataset='), ["dataset=''", 'the name of a folder in data/']),
    'train_init_from_empty': (('train.py', '--init_from='), ["init_from=''", "init_from != ''"]),
    'bench_prompt_empty': (('bench.py', '--prompt='), ["prompt=''", "prompt != ''"]),
    'frontier_results_empty': (('lab/frontier.py', '--results='), ["results=''", "results != ''"]),
}


@pytest.mark.parametrize('case', RULES)
def test_knob_out_of_range_is_one_line_error(case, tmp_path, monkeypatch, capsys):
    """The script runs here, as `python SCRIPT ARGS` would, in an empty folder: it must stop in configurator.py
    (without its rule it would go on, and fail on the missing checkpoint or data, or run)."""
    (script, *args), words = RULES[case]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, 'argv', [script, *args, '--device=cpu'] if script != 'prepare.py' else [script, *args])
    monkeypatch.setattr(sys, 'excepthook', sys.excepthook)  # configurator.py installs its own: put it back after
    with pytest.raises(InputError) as e:
        runpy.run_path(str(REPO / script), run_name='__main__')
    r = subprocess.CompletedProcess(sys.argv, 1, capsys.readouterr().out, f"error: {e.value}\n")  # what python prints
    one_line_error(r, *words)
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------- every way a data file can be broken: prepare.py's readers
def raised_on_purpose(e):
    """The excepthook's test (configurator.py): bad input is an InputError -> printed as one line."""
    return isinstance(e, InputError)


META_BROKEN = {'not_json': '{"tokenizer": "byte", ', 'not_utf8': b'\xff\xfe{"eot": 256}', 'empty': '',
               'not_an_object': '[257, 256]', 'a_number': '257', 'null': 'null',
               **{f'without_{k}': json.dumps({j: v for j, v in META.items() if j != k})
                  for k in META}}


@pytest.mark.parametrize('case', META_BROKEN)
def test_broken_meta_json_is_named_with_the_fix(case, tmp_path):
    d = tmp_path / 'data' / 'topics_byte'
    d.mkdir(parents=True)
    broken = META_BROKEN[case]
    (d / 'meta.json').write_bytes(broken if isinstance(broken, bytes) else broken.encode())
    with pytest.raises(ValueError) as e:
        prepare.load_meta(str(d))
    assert str(d / 'meta.json') in str(e.value) and '\n' not in str(e.value)
    assert str(e.value).endswith(f'{FIX} --data_root={tmp_path / "data"}') and raised_on_purpose(e.value)
    if case.startswith('without_'):
        assert f"lacks the key '{case[8:]}'" in str(e.value)


def test_a_data_folder_without_meta_json_names_its_fields(tmp_path):
    """train.bin and val.bin made by another program (nanoGPT's prepare writes meta.pkl): meta.json, which says how
    to read them, is named with its fields and the command that makes the folder (it was only 'not found')."""
    d = tmp_path / 'data' / 'topics_byte'
    d.mkdir(parents=True)
    np.arange(100, dtype=np.uint16).tofile(d / 'train.bin')
    with pytest.raises(InputError) as e:
        prepare.load_meta(str(d))
    for words in (f'{d / "meta.json"} not found beside its train.bin', 'JSON of tokenizer (gpt2, byte), vocab_size, '
                  'eot and dtype (uint16)', FIX):
        assert words in str(e.value), (words, str(e.value))


BIN_BROKEN = {'missing': None, 'empty': b'', 'odd_size': b'\x01\x00\x02',
              'id_beyond_vocab': np.array([1, 2, 257], np.uint16).tobytes()}


@pytest.mark.parametrize('case', BIN_BROKEN)
def test_broken_token_file_is_named_with_the_fix(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    d = make_data(tmp_path, 'topics_byte')
    (d / 'val.bin').unlink()
    if BIN_BROKEN[case] is not None:
        (d / 'val.bin').write_bytes(BIN_BROKEN[case])
    assert len(prepare.load_tokens(DATA, 'train')) > 0  # the other split is fine
    with pytest.raises(ValueError) as e:
        prepare.load_tokens(DATA, 'val')
    assert str(e.value).startswith(f'{DATA}/val.bin ') and str(e.value).endswith(FIX)
    assert '\n' not in str(e.value) and raised_on_purpose(e.value)
    if case == 'id_beyond_vocab':
        assert 'token id 257 >= vocab_size 257' in str(e.value)


def test_missing_eval_jsonl_is_named_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as e:
        prepare.read_eval_docs(f'{DATA}/eval.jsonl')
    assert str(e.value).startswith(f'{DATA}/eval.jsonl not found; make it (offline: add --mirror=')
    assert str(e.value).endswith(f') with: {FIX}') and raised_on_purpose(e.value)


def test_eval_jsonl_line_that_is_not_utf8_is_counted_as_malformed(tmp_path):
    lines = [b'{"topic": "a", "text": "caf\xc3\xa9"}', b'{"topic": "a", "text": "caf\xe9"}', b'\xff\xfe',
             b'{"topic": "a", "text": "ok"}\r']
    (tmp_path / 'eval.jsonl').write_bytes(b'\n'.join(lines) + b'\n\n')
    docs, n_bad = prepare.read_eval_docs(str(tmp_path / 'eval.jsonl'))
    assert [d['text'] for d in docs] == ['caf\u00e9', 'ok'] and n_bad == 2
