"""What a command asks, checked before any work: each key's domain and the rules across keys (guards.KEYS,
check_keys), config files (Python, as nanoGPT's), values as typed on a command line (text, tuples, paths, ~ and
$VAR), the options that depend on the model, the hints for a typo, the device and the memory a run needs. Bad
input is one line `error: ...` from the entry handler, naming the key in its own command-line syntax and the fix
(from rank 0 only, under torchrun): never a traceback or a silent change, and nothing written. Plus what used to
happen without a word: a long prompt's crop, a long value echoed whole, a folder name with a comma split in two.

The tables of every key (its values just outside its domain, of the wrong type; every rule across keys; a seeded
random search) are generated from guards.KEYS, not from a hand list: a key added to a script is covered the day it
is added. A case that needs the process boundary runs as a process in the background (harness.py's @work); the
rest run here, as `python SCRIPT ARGS` would (runpy): the same code, the same line, a few ms each."""
import ast, json, math, os, random, re, runpy, subprocess, sys
from dataclasses import asdict

import pytest
import torch

import guards
from harness import *  # noqa: F401,F403  (helpers, tables' runners and the jobs/job/here fixtures)
from model import GPT, GPTConfig
from guards import InputError, PATHS

# ---------------------------------------------------------------- bad input, as a process: one line, nothing changed
MPS = ['--device=mps', 'not usable', '--device=cpu']
BAD = {  # name: (the folder it starts from, its change or None, script and args, words the one line must contain)
    **on(untrained, {
        'sample_top_p_0': (None, (*SAMPLE, '--top_p=0'), ['top_p=0.0', '0 < top_p <= 1']),  # a rule, end to end
        'sample_prompt_not_utf8': (edit('prompt.txt', b'caf\xe9 \xff\n', under='.'),
                                   (*SAMPLE, '--start=FILE:prompt.txt'), ['prompt file prompt.txt', 'not UTF-8']),
        'eval_batch_size_0': (None, (*EVAL, '--batch_size=0'), ['batch_size=0', 'batch_size >= 1']),  # a rule, too
        'sample_device_mps': (None, (*SAMPLE, '--device=mps'), MPS),
        'eval_device_mps': (None, (*EVAL, '--device=mps'), MPS),
        'sample_out_dir_trailing_comma': (None, (*SAMPLE, '--out_dir=out,'), ['--out_dir=out,', 'an empty name']),
        'eval_out_dir_trailing_comma': (None, (*EVAL, '--out_dir=out,'), ['--out_dir=out,', 'an empty name']),
        'sample_start_is_a_folder': (None, (*SAMPLE, '--start=FILE:data'), ['prompt file data', 'Is a directory']),
        'sample_start_not_utf8': (None, (*SAMPLE, '--start=caf\udce9'), ['--start', 'not UTF-8']),  # byte 0xe9
        'sample_exit_at_nan': (None, (*SAMPLE, '--exit_at=maxprob:nan'), ['--exit_at=maxprob:nan', 'T >= 0']),
        'sample_exit_at_resid_-1': (None, (*SAMPLE, '--exit_at=resid:-1'), ['--exit_at=resid:-1', 'T >= 0'])}),
    **on(trained, {  # (a trained run in out/: a failed run never touches it)
        'n_embd_n_head': (None, ('train.py', *TINY, '--n_embd=30', '--n_head=4'),
                          ['n_embd=30', 'n_head=4', 'n_embd must be a multiple of n_head']),
        'loops_zero': (None, ('train.py', *TINY, '--loops=(2,0)'),
                       ['loops=(2, 0)', 'need a tuple of whole numbers, each at least 1']),
        'loops_negative': (None, ('train.py', *TINY, '--loops=-1'),
                           ['loops=(-1,)', 'need a tuple of whole numbers, each at least 1']),
        'supervise_too_deep': (None, ('train.py', *TINY, '--loops=(2,1)', '--supervise=(1,4)'),
                               ['supervise=(1, 4)', 'loops=(2, 1)', 'a supervised depth is past the last iteration']),
        'empty_prompt': (None, ('sample.py', '--start=', '--device=cpu'), ['prompt', 'empty']),
        'prompt_file_missing': (None, ('sample.py', '--start=FILE:nope.txt', '--device=cpu'),
                                ['prompt file nope.txt', 'No such file']),
        'bench_exit_at': (None, ('bench.py', '--exit_at=maxprob', '--device=cpu'), ['--exit_at=maxprob:', 'maxprob:0.9']),
        'bench_past_block_size': (None, ('bench.py', '--init_from=out', '--prompt=abc', '--device=cpu'),
                                  ['3 + 256', 'block_size 32']),
        'alpha_init_one': (None, ('train.py', *TINY, '--alpha_init=1.0'), ['alpha_init=1.0', 'need 0 < alpha_init < 1']),
        'alpha_init_zero': (None, ('train.py', *TINY, '--alpha_init=0.0'), ['alpha_init=0.0', 'need 0 < alpha_init < 1']),
        'n_head_zero': (None, ('train.py', *TINY, '--n_head=0'), ['n_head=0', '>= 1']),
        'config_raises': (lambda d: (d / 'mine.py').write_text('batch_size = 8\nlr = 1 / 0\n'), ('train.py', 'mine.py'),
                          ['mine.py', 'line 2', 'ZeroDivisionError']),
        'config_is_a_folder': (None, ('train.py', 'data'), ['config file data', 'Is a directory']),
        'dataset_outside_data': (None, ('train.py', *TINY, '--dataset=../../etc'),
                                 ['--dataset=../../etc', 'the name of a folder in data/, not a path']),
        'config_syntax_error': (lambda d: (d / 'mine.py').write_text('batch_size = 8\nlr = (1\n'), ('train.py', 'mine.py'),
                                ["config file 'mine.py'", 'line 2', 'SyntaxError'])})}


@work
def bad_input_is_one_line_error(d, case):
    return refused_run(d, *BAD[case][:3])


@pytest.mark.parametrize('case', BAD)
def test_bad_input_is_one_line_error(job, case):
    refused(job, BAD[case][3])


@work
def long_prompt_is_cropped_with_a_notice(d):
    untrained(d)
    (d / 'prompt.txt').write_text('the cat sat. ' * 10)  # 130 byte tokens; the model's context is 32
    return run(d, *SAMPLE, '--start=FILE:prompt.txt', '--temperature=0', '--num_samples=2', '--max_new_tokens=8')


def test_long_prompt_is_cropped_with_a_notice(job):
    samples = ok(job).split('---------------\n')
    assert 'the prompt has 130 tokens; keeping the last 32 (block_size)' in job.stderr
    prompt = ('the cat sat. ' * 10)[-32:]  # what the model sees: the last 32 tokens
    first, second = (s[s.index(prompt):] for s in samples[:2])
    assert first == second and len(first) == 32 + 8 + 1  # temperature 0: greedy, the same every time


@work
def bench_echoes_its_command_as_typed(d):
    return run(d, 'bench.py', '--device=cpu', '--phantom_ks=(1,)', '--k=1', '--n_embd=16',
               '--n_head=2', '--block_size=8', '--batch_size=1', '--gen_tokens=2',
               '--gen_loops=(1,)', '--repeats=1', '--prompt=ab', '--exit_at=maxprob:0.9')


def test_bench_echoes_its_command_as_typed(job):
    first = next(line for line in ok(job).splitlines() if line.startswith('$ python '))
    assert "'--phantom_ks=(1,)'" in first
    assert subprocess.run(['bash', '-n', '-c', first[2:]]).returncode == 0  # unquoted: bash syntax


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


@pytest.mark.skipif(torch.cuda.is_available(), reason='this machine has CUDA')
def test_cuda_without_a_gpu_says_so(tmp_path):
    make_data(tmp_path)
    for r in run_all(*[(tmp_path, script, '--device=cuda') for script in ('train.py', 'sample.py', 'eval.py')]):
        one_line_error(r, "--device=cuda", 'not usable on this machine', '--device=cpu')


@work
def max_iters_0_on_a_fresh_run_says_what_is_true(d):
    make_data(d)
    r = run(d, 'train.py', *TINY, '--max_iters=0', '--out_dir=fresh')
    return r, os.path.exists(d / 'fresh')


def test_max_iters_0_on_a_fresh_run_says_what_is_true(job):
    r, made = job
    assert r.returncode != 0 and 'nothing to train: max_iters is 0' in r.stderr, r.stderr
    assert 'ckpt.pt' not in r.stderr and not made  # there is no fresh/ckpt.pt "at iter 0"


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
        assert told(r.stderr) == [] and r.returncode == 0  # (ok: it said only what it was given)


# ---------------------------------------------------------------- options that depend on the model: in their syntax
OPTIONS = {  # name: (change(folder) or None, script and args, words the error line must contain); run here
    'sample_exit_at_without_a_loop': (lambda d: save_model(d / 'out', loops=()), (*SAMPLE, '--exit_at=maxprob:0.5'),
                                      ['--exit_at=maxprob:0.5', 'no tied loop', 'drop it']),
    'sample_n_loops_per_segment_on_one': (None, (*SAMPLE, '--n_loops=(4,4)'),
                                          ['n_loops=(4, 4)', 'the model has 1 segments']),  # model.py's
    'eval_exit_kind_on_act': (lambda d: save_model(d / 'out', act=True), (*EVAL, '--exit_kind=resid'),
                              ['--exit_kind=resid', 'ACT gate', 'drop it']),
    'frontier_models_misspelt': (None, ('lab/frontier.py', '--models=singel'),
                                 ['--models=singel', 'no model singel', 'single, multi', 'e.g. --models=']),
    'sample_exit_at_on_act': (lambda d: save_model(d / 'out', act=True), (*SAMPLE, '--exit_at=resid:0.1'),
                              ['--exit_at=resid:0.1', 'the model in out has an ACT gate', 'drop it']),
    'sample_n_loops_on_a_plain_model': (lambda d: save_model(d / 'out', loops=()), (*SAMPLE, '--n_loops=4'),
                                        ['n_loops=4', 'the model has 0 segments']),
    'eval_thresholds_on_act': (lambda d: save_model(d / 'out', act=True), (*EVAL, '--thresholds=0.9'),
                               ["'--thresholds=(0.9,)'", 'ACT gate']),
    'loops_not_a_number': (None, (*TRAIN, '--loops=x'), ['--loops=x', 'tuple']),
    'a_batch_larger_than_the_data': (None, (*TRAIN, '--batch_size=99999999'),
                                     ['--batch_size=99999999', 'train.bin holds', 'lower it']),
    'bench_estimate_of_no_config': (None, ('bench.py', '--estimate=v3,v99'),
                                    ['--estimate=v99', 'no config/v99.py', 'e.g. --estimate=v3']),
    'frontier_a_seed_twice': (None, ('lab/frontier.py', '--seeds=(1,1)'),
                              ["'--seeds=(1, 1)'", 'need a tuple of whole numbers, each once', 'e.g.']),
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


@pytest.mark.parametrize('case', OPTIONS)
def test_an_option_outside_its_domain_is_one_line_in_its_syntax(case, here, monkeypatch, capsys):
    refused_here(here, *OPTIONS[case], monkeypatch, capsys)


def test_every_model_is_checked_before_any_work(here, monkeypatch, capsys):
    save_model(here / 'out-act', act=True)
    fails(script(*EVAL, '--out_dir=out,out-act', '--exit_kind=resid', monkeypatch=monkeypatch, capsys=capsys),
          'out-act')
    assert not (here / 'out' / 'eval.json').exists()  # the first was not evaluated either


# ---------------------------------------------------------------- every knob out of range: stopped by its rule
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


# ---------------------------------------------------------------- values as typed
def test_a_text_option_takes_the_text_as_typed(here, monkeypatch, capsys):
    """--start=1984 used to answer 'start must be of type str'; --start=(1,2) is text too."""
    for text in ('1984', '(1,2)', 'True'):
        error, out = script(*SAMPLE, f'--start={text}', '--temperature=0', monkeypatch=monkeypatch, capsys=capsys)
        assert error is None and f"Overriding: start = '{text}'" in script.err and out.startswith(text)


def test_a_tuple_option_takes_one_value(here, monkeypatch, capsys):
    """eval.py --thresholds=0.9 used to answer 'must be of type tuple (like ())'."""
    error, out = script(*EVAL, '--thresholds=0.9', monkeypatch=monkeypatch, capsys=capsys)
    assert error is None
    assert [c['threshold'] for c in json.loads((here / 'out' / 'eval.json').read_text())['early_exit']] == [0.9]


def test_a_long_value_is_not_echoed_whole(here, monkeypatch, capsys):
    monkeypatch.setenv('NANOLOOP_ARGS_ONLY', '1')
    _, out = script(*SAMPLE, '--start=' + 'x' * 119_000, monkeypatch=monkeypatch, capsys=capsys)
    line = next(line for line in script.err.splitlines() if line.startswith('Overriding: start'))
    assert len(line) < 150 and '119,002 characters' in line


def test_a_folder_name_with_a_comma_is_not_split(here, monkeypatch, capsys):
    save_model(here / 'run-lr3e-3,bs16')
    error, out = script(*SAMPLE, '--out_dir=run-lr3e-3,bs16', monkeypatch=monkeypatch, capsys=capsys)
    assert error is None and '===' not in out
    error, out = script(*EVAL, '--out_dir=run-lr3e-3,bs16', monkeypatch=monkeypatch, capsys=capsys)
    assert error is None and (here / 'run-lr3e-3,bs16' / 'eval.json').exists()


def test_heads_too_narrow_to_learn_are_said(here, monkeypatch, capsys):
    """n_embd / n_head below 8 trains, and learns little: said once, at the start (a note, not a refusal: the
    model is legal, and a test or a sweep may want it)."""
    error, out = script(*TRAIN, '--n_head=4', '--out_dir=narrow', monkeypatch=monkeypatch, capsys=capsys)
    assert error is None and 'note: --n_embd=16 --n_head=4 gives heads of 4 numbers: below 8' in out
    error, out = script(*TRAIN, '--out_dir=wide', monkeypatch=monkeypatch, capsys=capsys)
    assert error is None and 'note:' not in out


# ---------------------------------------------------------------- memory: one line, and an estimate before the work
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


# ---------------------------------------------------------------- every key's domain, generated from guards.KEYS
SCRIPTS = ['train.py', 'eval.py', 'sample.py', 'prepare.py', 'bench.py', 'lab/frontier.py', 'lab/room/room.py']
CPU = {'prepare.py', 'lab/room/room.py'}  # (no --device: they run on the CPU only)
UNSET = '$NANOLOOP_NEVER_SET_VARIABLE'


def run_here(name, args, monkeypatch, capsys):
    """`python name args`, checking the arguments only -> ('ok', None) or ('error', the line) or ('crash', repr)."""
    monkeypatch.setattr(sys, 'argv', [name, *args])
    monkeypatch.setattr(sys, 'excepthook', sys.excepthook)  # configurator.py installs its own: put it back after
    monkeypatch.setenv('NANOLOOP_ARGS_ONLY', '1')
    try:
        runpy.run_path(str(REPO / name), run_name='__main__')
        outcome = ('ok', None)
    except InputError as e:
        outcome = ('error', f"error: {e}")
    except SystemExit as e:
        outcome = ('ok', None) if not e.code else ('crash', f"exit {e.code!r}")
    except Exception as e:  # a traceback
        outcome = ('crash', f"{type(e).__name__}: {e}")
    capsys.readouterr()
    return outcome


@pytest.fixture(scope='module')
def declared():
    """Each script's declarations, as configurator.py hands them to guards.check_keys: {script: (domain of each
    key, rules, defaults)}."""
    seen, check = {}, guards.check_keys
    mp = pytest.MonkeyPatch()
    mp.setattr(guards, 'check_keys', lambda table, rules, values, defaults: seen.update(
        table=guards.domains(table), rules=rules, defaults=dict(defaults)) or check(table, rules, values, defaults))
    out = {}
    for name in SCRIPTS:
        mp.setattr(sys, 'argv', [name, *(['--device=cpu'] if name not in CPU else [])])
        mp.setattr(sys, 'excepthook', sys.excepthook)
        mp.setenv('NANOLOOP_ARGS_ONLY', '1')
        with pytest.raises(SystemExit) as e:
            runpy.run_path(str(REPO / name), run_name='__main__')
        assert e.value.code in (0, None)
        out[name] = (seen['table'], seen['rules'], seen['defaults'])
    mp.undo()
    return out


def constants(domain):
    """The numbers a domain names (its bounds), and 0 and 1."""
    return sorted({0, 1, *(eval(n) for n in re.findall(r'(?<![\w.])\d+(?:\.\d+)?(?:e-?\d+)?(?:\*\*\d+)?', domain))})


def finite(v):  # (and within float32's range)
    return all(math.isfinite(x) and abs(x) < 3e38 for x in (v if type(v) is tuple else (v,)) if type(x) is float)


def inside(domain, v):
    return domain in ('any', *PATHS) or finite(v) and guards.holds(domain, {'x': v})


def candidates(domain, default):
    """Values of the key's type, at, just beside and beyond the numbers its domain names, and its choices."""
    cs = constants(domain)
    ints = {c + d for c in cs for d in (-1, 0, 1, 2)} | {2 * c for c in cs}
    ints = {int(i) for i in ints if abs(i) < 2 ** 70}
    floats = {float(c) + d for c in cs for d in (-1e-9, 0, 1e-9, -1, 1, 0.5)} | {math.inf, -math.inf, 1e300, -1e300}
    kind = type(default)
    if kind is bool:
        return [True, False]
    if kind is int:
        return sorted(ints)
    if kind is float:
        return sorted(floats)
    if kind is str:
        return [*re.findall(r"'([^']*)'", domain), 'nonesuch', '', 'x' * 3]
    tuples = [(), *((i,) for i in sorted(ints)), (1.5,), ('a',), (1, 1), (1, 2), (2, 1), (1, 2, 3), (0.5, 2.0)]
    return tuples + ([None, *sorted(ints)] if default is None else [])


def outside(domain, default, key):
    """The values just outside the key's domain: generated from the declaration."""
    if domain in PATHS:
        bad = [f'~nobody_at_all_{key}/run', f'{UNSET}/run', 'run\tx', ' run', 'run ']
        bad += [''] if default != '' else []
        bad += {'name': ['a/b', '..'], 'new folder': ['a_file'], 'new file': ['a_folder'],
                'folder': ['a_file', 'nowhere']}.get(domain, [])
        return bad
    return [v for v in candidates(domain, default) if not inside(domain, v)]


def typed(key, v):  # as a user types it: text as is, numbers and tuples as Python literals (inf as 1e999)
    return f'--{key}={v}' if type(v) is str else f'--{key}={v!r}'.replace('inf', '1e999')


def wrong_type(default):
    return {int: ['1.5', 'abc', '(1,)'], float: ['abc', '(1.0,)'], bool: ['2', 'yes'], tuple: ['abc', "{'a': 1}"],
            type(None): ['abc', '1.5']}.get(type(default), [])


def cases(declared):
    """(script, key, argument) for every key of every script: each value just outside, each of the wrong type."""
    for name, (table, _, defaults) in declared.items():
        for key, default in defaults.items():
            domain = table[key]
            for v in outside(domain, default, key):
                if type(v) is float and math.isnan(v):
                    continue  # (no way to type it: 'nan' is text, refused as the wrong type below)
                yield name, key, domain, typed(key, v)
            for text in wrong_type(default):
                yield name, key, domain, f'--{key}={text}'


@pytest.fixture
def cwd(tmp_path, monkeypatch):
    """tmp_path as the working directory, holding a_file and a_folder."""
    (tmp_path / 'a_file').write_text('x')
    (tmp_path / 'a_folder').mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(UNSET[1:], raising=False)
    return tmp_path


def listing(d):
    return sorted(str(p.relative_to(d)) for p in d.rglob('*'))


def test_every_key_declares_its_domain_once(declared):
    DOMAIN = guards.MODEL_KEYS
    for name, (table, rules, defaults) in declared.items():
        assert set(defaults) <= set(table), name  # (check_keys refuses to run otherwise)
        model_only = set(guards.domains(DOMAIN)) - set(defaults)
        assert set(table) - set(defaults) <= model_only, f"{name} declares keys it does not have"
        for key, default in defaults.items():
            if default is not None:
                assert inside(table[key], default), f"{name}: the default {key}={default!r} is outside its domain"
    tree = ast.parse((REPO / 'guards.py').read_text())  # each key once: no key in two groups of one table
    keys = next(n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == 'KEYS')
    for name, entry in zip(keys.keys, keys.values):
        groups = [k.value for k in entry.elts[0].keys if k is not None]  # (None: **MODEL_KEYS)
        flat = [k for group in groups for k in group.split()]
        assert len(flat) == len(set(flat)), f"{name.value}: a key declared twice"
    assert {k.value for k in keys.keys} == {s.rpartition('/')[2] for s in SCRIPTS}  # (by basename)


def test_every_domain_has_values_just_outside_it(declared):
    """The generator finds a value just outside every domain but 'any' (else the next test would test nothing)."""
    for name, (table, _, defaults) in declared.items():
        for key, default in defaults.items():
            if table[key] != 'any':
                assert outside(table[key], default, key), f"{name} --{key}: no value outside {table[key]!r}"
    assert len(list(cases(declared))) > 300


PYTHON = re.compile(r"\b(type|all|any|len|isinstance)\(|\bfor \w+ in\b|\.startswith\(|\bis None\b|\bnot in\b")


def test_a_value_outside_its_domain_or_of_the_wrong_type_is_one_error_line(declared, cwd, monkeypatch, capsys):
    """... naming the key, and saying what it needs in words, never in the rule's Python."""
    before, failures = listing(cwd), []
    for name, key, domain, arg in cases(declared):
        kind, line = run_here(name, [arg] + (['--device=cpu'] if name not in CPU else []), monkeypatch,
                              capsys)
        if kind != 'error' or f'--{key}' not in line and f"'--{key}" not in line or PYTHON.search(line or ''):
            failures.append(f"{name} {arg!r} ({domain}): {kind} {line}")
    assert not failures, '\n'.join(failures[:30]) + f"\n({len(failures)} cases)"
    assert listing(cwd) == before  # nothing written


def test_a_value_typed_in_a_config_file_is_checked_the_same(declared, cwd, monkeypatch, capsys):
    """float('nan') can only come from a config file; a config file's values go through the same check."""
    (cwd / 'nan.py').write_text("learning_rate = float('nan')\n")
    kind, line = run_here('train.py', ['nan.py'], monkeypatch, capsys)
    assert kind == 'error' and 'learning_rate' in line and 'float32 range' in line


def test_a_path_is_expanded_as_a_shell_would_after_an_equals_sign(declared, cwd, monkeypatch, capsys):
    """bash leaves --out_dir=~/run and --out_dir=$HOME/run alone after '='; the scripts expand them."""
    monkeypatch.setenv('HOME', str(cwd / 'home'))
    monkeypatch.setenv('RUNS', str(cwd / 'runs'))
    values = {}
    check = guards.check_keys
    monkeypatch.setattr(guards, 'check_keys', lambda t, r, v, d: check(t, r, v, d) or values.update(v))
    assert run_here('train.py', ['--out_dir=~/run', '--device=cpu'], monkeypatch, capsys)[0] == 'ok'
    assert values['out_dir'] == str(cwd / 'home' / 'run')
    assert run_here('sample.py', ['--out_dir=$RUNS/a,~/b', '--device=cpu'], monkeypatch, capsys)[0] == 'ok'
    assert values['out_dir'] == f"{cwd / 'runs' / 'a'},{cwd / 'home' / 'b'}"
    kind, line = run_here('train.py', [f'--out_dir={UNSET}/run', '--device=cpu'], monkeypatch, capsys)
    assert kind == 'error' and f"'{UNSET}' is left as typed: an unset $VAR" in line
    assert listing(cwd) == ['a_file', 'a_folder']  # no folder named '~' or '$...'


def test_every_rule_across_keys_is_broken_by_values_each_domain_allows(declared, cwd, monkeypatch, capsys):
    """For each rule, a seeded search over values inside every key's domain finds some that break the rule; the
    script must refuse them in one line that says the rule in words."""
    rng = random.Random(39)
    for name, (table, rules, defaults) in declared.items():
        for rule, words in rules:
            keys = [k for k in dict.fromkeys(re.findall(r'[a-z_]+', rule)) if k in defaults]
            pools = {k: [v for v in candidates(table[k], defaults[k]) if inside(table[k], v)] + [defaults[k]]
                     for k in keys}
            for _ in range(2000):
                pick = {k: rng.choice(pools[k]) for k in keys}
                values = {**defaults, **pick}
                if not guards.holds(rule, {**values, 'changed': {k for k in defaults if values[k] != defaults[k]}}):
                    break
            else:
                raise AssertionError(f"{name}: no values inside the domains break {rule!r}")
            args = [typed(k, v) for k, v in pick.items()] + (['--device=cpu'] if name not in CPU else [])
            kind, line = run_here(name, args, monkeypatch, capsys)
            assert kind == 'error' and words in line, (name, args, kind, line)
            assert rule not in line  # (words, never the rule's Python)


POOL = ['', '0', '-1', '1', '2', '1.5', '-0.5', '1e999', '-1e999', '1e-300', '10**9', '99999999999999999999999', '()',
        '(0,)', '(1,)', '(2, 3)', '(1.5,)', "('a',)", '((1,),)', '[1]', '{}', 'None', 'True', 'False', 'nan', 'abc',
        'a,b', ',', '~/x', '~nobody_at_all/x', '$HOME/x', f'{UNSET}/x', 'a_file', 'a_folder', '.', '..', '/', 'é',
        '\t', ' x', 'maxprob:0.9', 'resid:-1', 'learned:2', 'maxprob:nan', 'x:1', 'FILE:a_folder', 'FILE:nofile']


def test_a_random_search_over_all_keys_meets_no_traceback(declared, cwd, monkeypatch, capsys):
    rng, crashes = random.Random(1), []
    for _ in range(400):
        name = rng.choice(SCRIPTS)
        table, _, defaults = declared[name]
        keys = rng.sample(sorted(defaults), rng.randint(1, 3))
        args = []
        for k in keys:  # a value from the pool, or one beside the key's domain
            near = [typed(k, v) for v in candidates(table[k], defaults[k]) if not (type(v) is float and math.isnan(v))]
            args.append(rng.choice([f'--{k}={rng.choice(POOL)}', rng.choice(near or [f'--{k}=1'])]))
        kind, line = run_here(name, args, monkeypatch, capsys)
        if kind == 'crash' or kind == 'error' and '\n' in line:
            crashes.append(f"{name} {args}: {line}")
    assert not crashes, '\n'.join(crashes[:20])
    assert listing(cwd) == ['a_file', 'a_folder']


@pytest.mark.slow
def test_generated_cases_as_processes(declared, tmp_path):
    """The first generated case of each script, and its first path case, as `python SCRIPT ARG` in a process:
    exit 1, one line, nothing written."""
    picked = {}
    for name, key, domain, arg in cases(declared):
        picked.setdefault((name, domain in PATHS), (name, arg))
    (tmp_path / 'a_file').write_text('x')
    for name, arg in picked.values():
        r = run(tmp_path, name, arg, *(['--device=cpu'] if name not in CPU else []))
        assert r.returncode == 1, (arg, r.stderr)
        one_line_error(r, arg.partition('=')[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ['a_file']  # nothing written


def test_a_key_typed_without_its_dashes_is_named(cwd, monkeypatch, capsys):
    """batch_size=3 and -batch_size=3 used to be read as config files: 'config file batch_size=3 not found'."""
    for arg in ('batch_size=3', '-batch_size=3'):
        kind, line = run_here('sample.py', [arg], monkeypatch, capsys)
        assert kind == 'error' and 'neither --key=value nor a config file' in line and '--batch_size=3' in line


def test_nan_and_inf_are_out_of_range_and_an_idle_key_names_what_it_needs(cwd, monkeypatch, capsys):
    """nan and inf are floats out of range (not 'of the wrong type'); a key that acts only with another says so."""
    for text in ('nan', 'inf', '-inf'):
        kind, line = run_here('train.py', [f'--learning_rate={text}', '--device=cpu'], monkeypatch, capsys)
        assert kind == 'error' and 'float32 range' in line and 'of type' not in line, line
    kind, line = run_here('train.py', ['--exit_beta=0.3', '--device=cpu'], monkeypatch, capsys)
    # the key it gives as typed; the other, with where its value came from
    assert kind == 'error' and line.startswith('error: --exit_beta=0.3, exit_gate = False (the default): ')
    assert 'does nothing without exit_gate' in line
