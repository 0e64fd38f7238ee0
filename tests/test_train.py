"""End to end: configurator, prepare -> train -> resume -> sample, log lines, checkpoint contents, a paper config
and torchrun, every script run as a subprocess (CPU, tiny models, byte-level data made here, no network).

Speed: each script runs in a process forked from one that imported torch once (harness.py, forkserver.py),
and each test's scripts run in a `@work` function that the module starts in the background (a few threads, in
test order) as soon as the first test asks; the test itself then only waits for its own results and asserts."""
import json, os, re

import pytest
import torch

from harness import *  # noqa: F401,F403  (helpers and the jobs/job fixtures)


# ---------------------------------------------------------------- configurator
@work
def configurator_errors_and_accepted_values(d):
    make_data(d)
    return run_all(
        (d, 'train.py', '--learnin_rate=1'),
        (d, 'train.py', '--batch_size=abc'),
        (d, 'train.py', 'config/does_not_exist.py'),
        # bools from true/False, an int for a float, an int for a tuple; eval_only stops after one evaluation
        (d, 'train.py', *TINY, '--compile=true', '--compile=False', '--learning_rate=1', '--loops=4', '--eval_only=True'))


def test_configurator_errors_and_accepted_values(job):
    unknown, wrong_type, no_file, accepted = job
    assert "did you mean --learning_rate?" in one_line_error(unknown, 'unknown config key', 'learnin_rate')
    one_line_error(wrong_type, 'batch_size', 'type int', 'abc')
    one_line_error(no_file, 'config/does_not_exist.py', 'No such file')
    out, said = ok(accepted), accepted.stderr  # ('Overriding:' lines on stderr: stdout is the run's)
    assert 'Overriding: compile = True' in said and 'Overriding: compile = False' in said
    assert 'Overriding: learning_rate = 1.0' in said
    assert 'Overriding: loops = (4,)' in said
    assert '(tied blocks unrolled (4,))' in out  # the model really has one segment of 4
    assert re.search(r'^iter 0: train loss \d+\.\d+, val loss \d+\.\d+$', out, re.M)


# ---------------------------------------------------------------- prepare -> train -> resume -> sample
SPEAKERS = ['ROMEO', 'JULIET', 'NURSE', 'MERCUTIO', 'TYBALT', 'BENVOLIO']


def make_mirror(root):
    """A few KB of speeches where prepare.py --mirror looks for tinyshakespeare."""
    rng = random.Random(1)
    speeches = [f"{rng.choice(SPEAKERS)}:\n" + '\n'.join(' '.join(rng.choice(WORDS) for _ in range(8)).capitalize() + ','
                                                       for _ in range(rng.randint(1, 3))) for _ in range(80)]
    path = Path(root, 'mirror', 'raw.githubusercontent.com', 'karpathy/char-rnn/master/data/tinyshakespeare/input.txt')
    path.parent.mkdir(parents=True)
    path.write_text('\n\n'.join(speeches) + '\n')


def samples(out, prompt):
    """sample.py's stdout -> [legend line (with --show_depth)] + one entry per sample (each starts with prompt)."""
    m = re.search(rf'^(loop depth:|{re.escape(prompt)})', out, re.M)
    assert m, f"no sample starting with {prompt!r} in:\n{out}"
    body = out[m.start():]
    head, sep, rest = body.partition('\n') if body.startswith('loop depth:') else ('', '', body)
    return ([head] if sep else []) + rest.split('\n---------------\n')[:-1]


# two tied segments with multi-depth supervision: the log shows every supervised depth and both alphas
CHAIN = [*TINY, '--dataset=shakespeare_byte', '--loops=(2,1)', '--supervise=(1,2)', '--eval_interval=4']


@work
def prepare_train_resume_sample(d):
    make_mirror(d)
    r = {'dir': d}
    r['prepare'] = run(d, 'prepare.py', '--dataset=shakespeare', '--tokenizer=byte', '--mirror=mirror', '--eval_docs=5')
    r['train'] = run(d, 'train.py', *CHAIN, '--max_iters=4')
    r['ckpt_after_train'] = load(d / 'out' / 'ckpt.pt') if r['train'].returncode == 0 else None
    r['resume'] = run(d, 'train.py', *CHAIN, '--init_from=resume', '--max_iters=7')
    (d / 'prompt.txt').write_text('JULIET:\n')
    r['painted'], r['from_file'] = run_all(
        (d, 'sample.py', '--start=ROMEO:', '--num_samples=2', '--max_new_tokens=6', '--top_p=0.9',
         '--repetition_penalty=1.3', '--n_loops=3', '--show_depth=True', '--device=cpu'),
        (d, 'sample.py', '--start=FILE:prompt.txt', '--num_samples=3', '--max_new_tokens=5', '--temperature=0.5',
         '--top_k=5', '--exit_at=maxprob:0.5', '--device=cpu'))
    r['painted_tty'] = on_a_terminal(d, 'sample.py', *r['painted'].args[1:])
    return r


def on_a_terminal(d, *argv):
    """A script's stdout when it writes to a terminal (a pseudo-terminal): its text as it came."""
    import pty
    reader, terminal = pty.openpty()
    p = subprocess.Popen([sys.executable, str(REPO / argv[0]), *argv[1:]], cwd=d, env=ENV, stdout=terminal,
                         stderr=subprocess.DEVNULL)
    os.close(terminal)
    out = b''
    while True:
        try:
            chunk = os.read(reader, 65536)
        except OSError:  # (EIO: the script ended and closed the terminal)
            break
        if not chunk:
            break
        out += chunk
    p.wait(timeout=PATIENCE)
    os.close(reader)
    return out.decode(errors='replace').replace('\r\n', '\n')  # (a terminal ends lines in \r\n)


def test_prepare_train_resume_sample(job):
    out = ok(job['prepare'])
    data = job['dir'] / 'data' / 'shakespeare_byte'
    assert {p.name for p in data.iterdir()} >= {'train.bin', 'val.bin', 'meta.json', 'eval.jsonl'}, out
    assert json.loads((data / 'meta.json').read_text())['vocab_size'] == 257

    first = ok(job['train'])
    assert sorted(losses(first)) == [1, 2, 3, 4]
    assert job['ckpt_after_train']['iter_num'] == 4

    # resume: the architecture comes from the checkpoint, the iteration count continues
    second = ok(job['resume'])
    assert 'resuming from out/ckpt.pt' in second and 'training from iter 4' in second
    assert sorted(losses(second)) == [5, 6, 7]
    assert load(job['dir'] / 'out' / 'ckpt.pt')['iter_num'] == 7

    # --show_depth at a fixed depth (--n_loops=3 -> 3 + 3 = 6), into a pipe: no colours, but under each new
    # character its loop depth, on the line below (the prompt's: blank); at a fixed depth every token's is 6
    legend, *shown = samples(ok(job['painted']), 'ROMEO:')
    assert legend.startswith('loop depth:') and '\x1b[' not in ok(job['painted'])
    assert len(shown) == 2  # --num_samples
    for s in shown:  # each line of text, then its marks (a sample may hold newlines)
        marks = s.split('\n')[1::2]
        assert s.startswith('ROMEO:') and marks[0].startswith(' ' * 6), s
        assert all(re.fullmatch(r' *6*', m) for m in marks) and 1 <= ''.join(marks).count('6'), s
    # on a terminal, the same in colour: a legend of depths 1, 3 and 6, each new token on an ANSI background
    legend, *shown = samples(job['painted_tty'], 'ROMEO:')
    assert legend.startswith('loop depth:') and legend.count('\x1b[48;5;') == 3
    assert all(1 <= s.count('\x1b[48;5;') <= 6 for s in shown) and len(shown) == 2
    shown = samples(ok(job['from_file']), 'JULIET:\n')  # FILE: prompt
    assert len(shown) == 3 and all(s.startswith('JULIET:\n') for s in shown)
    assert '\x1b[' not in ''.join(shown)
    # each sample reports its speed on stderr, and with an exit policy the mean depth of its new tokens (max 3)
    speeds = re.findall(r'^\[5 tokens, (\d+\.\d) tok/s, mean depth (\d\.\d\d) of 3\]$', job['from_file'].stderr, re.M)
    assert len(speeds) == 3 and all(float(s) > 0 and 1 <= float(d) <= 3 for s, d in speeds), job['from_file'].stderr
    assert 'tok/s' in job['painted'].stderr and 'mean depth' not in job['painted'].stderr  # fixed depth: no mean


def test_log_line_content(jobs):
    job = jobs['test_prepare_train_resume_sample']
    lines = log_lines(ok(job['train']))
    assert len(lines) == 4
    for line in lines:  # loss, per-depth losses (supervise=(1,2) + the final depth 3), both alphas, speed
        assert re.search(r'loss \d+\.\d+, depths k1:\d+\.\d+ k2:\d+\.\d+ k3:\d+\.\d+', line), line
        assert re.search(r'alpha 0\.\d+/0\.\d+', line), line
        assert re.search(r'\d+ms/iter', line) and re.search(r'\d[\d,]* tok/s', line), line


def test_checkpoint_loads_with_weights_only(jobs):
    job = jobs['test_prepare_train_resume_sample']
    ckpt = job['ckpt_after_train']  # torch.load(weights_only=True): tensors and plain data only
    assert ckpt is not None, job['train'].stderr
    assert {'model', 'optimizer', 'model_args', 'iter_num', 'config'} <= set(ckpt)
    assert ckpt['iter_num'] == 4
    assert ckpt['model_args']['loops'] == (2, 1) and ckpt['model_args']['supervise'] == (1, 2)
    assert ckpt['model_args']['vocab_size'] == 257 and ckpt['model_args']['n_embd'] == 32
    assert ckpt['config']['dataset'] == 'shakespeare_byte' and ckpt['config']['max_iters'] == 4
    assert 'state' in ckpt['optimizer'] and 'param_groups' in ckpt['optimizer']
    assert ckpt['model'] and all(isinstance(v, torch.Tensor) for v in ckpt['model'].values())


# ---------------------------------------------------------------- the gate_detached control
@work
def gate_detached_acts_at_its_steps_only(d):
    make_data(d)
    gate = [*TINY, '--exit_gate=True', '--supervise=(1,)', '--exit_beta=1', '--max_iters=3',
            '--eval_interval=100']
    windows = ['(0,0)', '(3,9)', '(1,3)', '(0,1)']  # never, after the run, steps 1-2, step 0
    rs = run_all(*[(d, 'train.py', *gate, f'--gate_detached={w}', f'--out_dir=out{i}')
                   for i, w in enumerate(windows)], (d, 'train.py', *gate, '--out_dir=out4'))
    return [ok(r) and load(d / f'out{i}' / 'ckpt.pt')['model'] for i, r in enumerate(rs)]


def test_gate_detached_acts_at_its_steps_only(job):
    """train.py --gate_detached=(a, b): the exit gate reads detached states at steps a <= iter < b
    only. A window after the run, or at step 0 (the gate starts at zero: no gradient reaches the
    states through it yet), trains the very same weights; steps 1-2 change the language model."""
    never, after, middle, first, default = job
    lm = [n for n in never if 'exit_gate' not in n]
    for same in (after, first, default):  # (by default the gate is never detached)
        assert all(torch.equal(never[n], same[n]) for n in never)
    assert any(not torch.equal(never[n], middle[n]) for n in lm)


# ---------------------------------------------------------------- where a run ran
@work
def the_log_says_where_the_run_ran(d):
    make_data(d)
    return ok(run(d, 'train.py', *TINY, '--max_iters=1', '--eval_interval=100'))


def test_the_log_says_where_the_run_ran(job):
    """Every run's log names its commit ('+': the tree differs from it), torch, CPU and threads;
    the CPU by its model name and, where /proc/cpuinfo gives them, its family, model, stepping."""
    where = re.search(r'^ran on: commit (\S+), torch (\S+), cpu (.+), threads (\d+)$', job, re.M)
    assert where and where[2] == torch.__version__ and int(where[4]) >= 1
    info = open('/proc/cpuinfo').read() if os.path.exists('/proc/cpuinfo') else ''
    name, family = (re.search(rf'^{k}\s*: (.*)', info, re.M) for k in ('model name', 'cpu family'))
    assert not name or re.fullmatch(re.escape(name[1]) + (
        rf' \(family {family[1]} model \d+ stepping \d+\)' if family else ''), where[3]), where[3]
    assert re.fullmatch(r'[0-9a-f]{4,}\+?|unknown', where[1]), where[1]


# ---------------------------------------------------------------- ACT
@work
def act_log_shows_depth_and_ponder(d):
    make_data(d)
    return run(d, 'train.py', *TINY, '--act=True', '--loops=(3,)', '--max_iters=2', '--eval_interval=100',
               '--dtype=float32')


def test_act_log_shows_depth_and_ponder(job):
    """ponder is the mean of N + R (N: a token's steps, R: the remainder 1 - its h before the halting step). The
    gate starts at zero weights and bias -3: h = sigmoid(-3) at every step, never 1 - eps in 3 steps, so every
    token runs all 3 and R = 1 - 2 sigmoid(-3); one step of warmup later the gate has barely moved."""
    lines = log_lines(ok(job))
    assert len(lines) == 2
    for line in lines:
        m = re.search(r'depth (\d+\.\d+) ponder (\d+\.\d+)', line)
        assert m, line
        depth, ponder = map(float, m.groups())
        assert depth + 0.01 <= ponder <= depth + 1  # per token N + eps < N + R <= N + 1 (eps 0.01)
        want = 3 + 1 - 2 * torch.sigmoid(torch.tensor(-3.0)).item()  # N + R = 3.905
        assert depth == 3.0 and abs(ponder - want) <= 0.02, line
        if line.startswith('iter 1:'):  # the first step's forward: the gate at its start, exactly
            assert m.group(2) == f'{want:.2f}', line
        assert re.search(r'alpha \d\.\d+', line), line


# ---------------------------------------------------------------- the paper's best config
@work
def v13_config_starts_training(d):
    if not (REPO / 'config' / 'v13.py').exists():
        return None
    make_data(d)
    return run(d, 'train.py', REPO / 'config' / 'v13.py', '--phantom=False', '--dataset=tiny', '--max_iters=1',
               '--batch_size=1', '--block_size=32', '--eval_iters=1', '--gradient_accumulation_steps=1',
               '--device=cpu', '--dtype=float32', '--compile=False', '--out_dir=out'), d


def test_v13_config_starts_training(job):
    if job is None:
        pytest.skip('config/v13.py does not exist yet')
    r, d = job
    line, = log_lines(ok(r))
    assert re.search(r'alpha 0\.\d+/0\.\d+/0\.\d+', line), line  # three tied segments
    args = load(d / 'out' / 'ckpt.pt')['model_args']
    assert args['loops'] == (10, 10, 10) and args['n_embd'] == 320 and args['phantom'] is False


# ---------------------------------------------------------------- torchrun
@work
def torchrun_two_processes_cpu(d):
    make_data(d)
    return run(d, 'train.py', *TINY, '--max_iters=3', '--eval_interval=3', '--gradient_accumulation_steps=2',
               '--backend=gloo', launcher=('-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2')), d


def test_torchrun_two_processes_cpu(job):
    r, d = job
    out = ok(r)
    assert [int(l.split(':')[0][5:]) for l in log_lines(out)] == [1, 2, 3]  # each iteration logged once (rank 0)
    assert 'tokens per iteration: 256' in out  # 2 processes x 1 micro step x 4 x 32
    assert load(d / 'out' / 'ckpt.pt')['iter_num'] == 3


# ---------------------------------------------------------------- dtype: bf16 where the CPU makes it fast
def faking_bf16(has):
    """A launcher (python -c ... script args) that fakes the CPU's bf16 instructions (AMX, AVX-512 BF16) as
    present or absent, then runs the script as `python script args` would."""
    return ('-c', "import os, runpy, sys, torch; "
            f"torch.cpu._is_amx_tile_supported = torch.cpu._is_avx512_bf16_supported = lambda: {has}; "
            "sys.argv = sys.argv[1:]; sys.path.insert(0, os.path.dirname(sys.argv[0])); "
            "runpy.run_path(sys.argv[0], run_name='__main__')")


@work
def the_start_lines_name_the_dtype_and_why(d):
    make_data(d)
    train = (*TINY, '--max_iters=2', '--eval_interval=2')
    r = dict(zip(('fp32', 'bf16', 'given'), [finish(p) for p in (
        start(d, 'train.py', *train, '--out_dir=out-fp32', launcher=faking_bf16(False)),
        start(d, 'train.py', *train, '--out_dir=out-bf16', launcher=faking_bf16(True)),
        start(d, 'train.py', *train, '--out_dir=out-given', '--dtype=float32', launcher=faking_bf16(True)))]))
    r['ckpt'] = load(d / 'out-bf16' / 'ckpt.pt') if r['bf16'].returncode == 0 else None
    r['sample'], r['eval'] = [finish(p) for p in (
        start(d, 'sample.py', '--out_dir=out-bf16', '--max_new_tokens=3', '--num_samples=1', '--device=cpu',
              launcher=faking_bf16(True)),
        start(d, 'eval.py', '--out_dir=out-fp32', '--eval_iters=1', '--batch_size=4', '--device=cpu',
              launcher=faking_bf16(False)))]
    return r


def test_the_start_lines_name_the_dtype_and_why(job):
    """dtype='' trains in bf16 autocast on a CPU with bf16 instructions, in float32 on one without; the
    start line says which and why. A bf16-trained checkpoint is float32 (autocast keeps fp32 parameters)."""
    start_line = 'training from iter 0 to 2 on cpu; '
    assert start_line + 'float32: this CPU has no bf16 instructions' in ok(job['fp32'])
    assert start_line + 'bfloat16 autocast: this CPU has AMX and avx512_bf16 instructions' in ok(job['bf16'])
    assert start_line + 'float32: --dtype=float32' in ok(job['given'])
    assert job['ckpt']['config']['dtype'] == 'bfloat16'
    tensors = {**job['ckpt']['model'], **{f'optimizer {i} {k}': v for i, s in job['ckpt']['optimizer']['state'].items()
                                          for k, v in s.items() if k != 'step'}}
    assert len(tensors) > 10 and {n: t.dtype for n, t in tensors.items() if t.dtype != torch.float32} == {}
    assert 'bfloat16 autocast: the dtype the model was trained with' in job['sample'].stderr  # issue 29
    assert ok(job['sample']).count('---------------') == 1  # stdout: still just the sample
    ok(job['eval'])  # (stderr: eval's stdout is its report)
    assert re.search(r'^float32: the dtype the model was trained with$', job['eval'].stderr, re.M)


# ---------------------------------------------------------------- bench.py
BENCH = ['--n_embd=32', '--k=3', '--phantom_ks=(1,4)', '--gen_tokens=12', '--prompt=abcd', '--repeats=1',
         '--batch_size=2', '--block_size=16', '--exit_at=resid:1e9,maxprob:1,maxprob:0.005', '--device=cpu']
GEN_ROW = re.compile(r'generate 12, (.+): KV cache \+ (.+), mean depth ([\d.]+)/(\d+) \(tied-block calls ([\d.]+)\), '
                     r'([\d.]+) blocks/token')


@work
def bench_prints_one_table(d):
    return run(d, 'bench.py', *BENCH, '--gen_loops=(2,2)', '--dtype_widths=(16,)')


@work
def bench_times_trained_models_and_an_act_model(d):
    copy_run(trained_run(d), d)
    ok(run(d, 'train.py', *TINY, '--max_iters=2', '--eval_interval=100', '--act=True', '--out_dir=out-act'))
    return run(d, 'bench.py', *BENCH, '--init_from=out,out-act')


def bench_rows(out):
    return {r[0]: r[1:] for r in (line.strip('| ').split(' | ') for line in out.splitlines() if line.startswith('| '))}


def test_bench_prints_one_table(job):
    out = ok(job)
    assert '$ python ' in out and 'bench.py --n_embd=32' in out  # the command, and the shapes, in the header
    assert 'batch 2 x 16, d=32' in out and 'generation, random weights: [1][x2][x2][1] d=32, 4-token prompt' in out
    rows = bench_rows(out)
    assert re.fullmatch(r"\d+\.\d{3}x plain's time", rows['train: tied loop [1][A x3][1]'][-1])
    assert rows['train: plain stack, 5 distinct blocks'][3] == rows['train: tied loop [1][A x3][1]'][3]  # same FLOPs
    for width in (32, 16):  # float32 vs bf16 autocast at n_embd and at each of dtype_widths: the same FLOPs
        fp32, bf16 = (rows[f'train d={width} [1][A x3][1]: {dtype}'] for dtype in ('float32', 'bf16 autocast'))
        assert fp32[3] == bf16[3] and re.fullmatch(r"\d+\.\d\dx float32's speed", bf16[-1])
    assert float(fp32[3]) < float(rows['train d=32 [1][A x3][1]: float32'][3])  # d=16: the smaller model
    assert re.search(r'^dtype: training rows (bfloat16 autocast|float32): this CPU has .*; generation rows '
                     r'float32: decoding on a CPU', out, re.M)
    mem = {k: float(rows[f'train k={k}: phantom'][2]) / float(rows[f'train k={k}: full backprop'][2]) for k in (1, 4)}
    assert abs(mem[1] - 1) < 0.01 and mem[4] < 0.8  # phantom saves the activations of all but the last iteration
    assert float(rows['train k=4: full backprop'][2]) > float(rows['train k=1: full backprop'][2])
    gen = [r for r in rows if r.startswith('generate 12, ')]
    assert len(gen) == 6 and all(float(rows[r][1]) > 0 for r in gen)  # re-encoding, cache, 3 exits, the ACT gate
    assert 'generate 12, random weights: KV cache, 6.0 blocks/token' in rows  # [1][x2][x2][1]
    policies = {m[2]: m.groups() for m in map(GEN_ROW.fullmatch, gen) if m}
    assert set(policies) == {'exit resid:1e9', 'exit maxprob:1', 'exit maxprob:0.005', 'ACT gate'}
    for _, policy, depth, loops, calls, blocks in policies.values():
        assert depth == calls, policy  # the depth the model reports = the tied-block calls counted
    assert policies['exit resid:1e9'][2:] == ('2.00', '4', '2.00', '4.0')  # huge threshold: 1 step a segment
    assert policies['exit maxprob:1'][2:] == ('4.00', '4', '4.00', '10.0')  # unreachable: every step, each
    assert 2 < float(policies['exit maxprob:0.005'][2]) < 4  # with a readout (coda) check; in between: varied
    assert policies['ACT gate'][2] == '4.00'  # the gate's initial bias runs every token to the max
    assert re.search(r'\dx cache: \d+% of the ideal 1\.50x', rows[gen[2]][-1])  # resid:1e9: 6 / 4 blocks


def test_bench_times_trained_models_and_an_act_model(job):
    """--init_from=a,b: the generation rows of each checkpoint; an ACT model's full depth is its blocks without
    the gate."""
    out = ok(job)
    assert 'generation, out: [1][x2][1] d=32, 4-token prompt' in out
    assert 'generation, out-act: [1][x2][1] d=32, 4-token prompt' in out
    rows = bench_rows(out)
    assert 'generate 12, out: KV cache, 4.0 blocks/token' in rows
    assert 'generate 12, out-act: KV cache, 4.0 blocks/token' in rows  # the gate-less twin: full depth
    policies = {(m[1], m[2]): m.groups() for m in map(GEN_ROW.fullmatch, rows) if m}
    assert set(policies) == {('out', 'exit resid:1e9'), ('out', 'exit maxprob:1'), ('out', 'exit maxprob:0.005'),
                             ('out-act', 'ACT gate')}
    assert policies['out', 'exit resid:1e9'][2:] == ('1.00', '2', '1.00', '3.0')
    assert policies['out-act', 'ACT gate'][2] == policies['out-act', 'ACT gate'][4]


# ---------------------------------------------------------------- gpu_check.sh, on a CPU with tiny overrides
@work
def gpu_check_runs_every_step_and_sums_up(d):
    make_data(d)
    env = {**ENV, 'DEVICE': 'cpu', 'COMPILE': 'False', 'DATASET': 'tiny', 'OUT': 'gc',
           'BENCH_ARGS': ' '.join(BENCH), 'SAMPLE_ARGS': '--max_new_tokens=5',
           'TRAIN_ARGS': ' '.join([*TINY, '--max_iters=3', '--eval_interval=3', '--lr_decay_iters=3']),
           'EVAL_ARGS': '--eval_iters=1 --batch_size=4 --max_docs=2'}
    return subprocess.run(['bash', str(REPO / 'gpu_check.sh')], cwd=d, env=env, capture_output=True, text=True,
                          timeout=PATIENCE), d


def test_gpu_check_runs_every_step_and_sums_up(job):
    """gpu_check.sh (bench, 300 steps of v13, sample, eval: for a GPU) runs through on a CPU when told to run
    small, logs each step under $OUT and writes the headline figures to $OUT/summary.txt."""
    r, d = job
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    assert {p.name for p in (d / 'gc').iterdir()} >= {'bench.log', 'train.log', 'sample.log', 'eval.log',
                                                      'times.txt', 'summary.txt', 'out-v13'}
    summary = (d / 'gc' / 'summary.txt').read_text()
    assert re.search(r"^\| train d=32 \[1\]\[A x3\]\[1\]: bf16 autocast \|.*x float32's speed \|$", summary, re.M)
    assert re.search(r'^dtype: training rows (bfloat16 autocast|float32): ', summary, re.M)
    assert re.search(r'^\$ python \S+/train.py \S+/config/v13.py --dataset=tiny ', summary, re.M)
    assert 'training from iter 0 to 3 on cpu; ' in summary and re.search(r'^iter 3: train loss', summary, re.M)
    assert len(re.findall(r'^\[5 tokens, [\d.]+ tok/s\]$', summary, re.M)) == 2  # sample.py: 2 samples
    assert re.search(r'^suffix NLL \(2 docs', summary, re.M)
    assert re.findall(r'^(\w+): \d+ s$', summary, re.M) == ['bench', 'train', 'sample', 'eval']


@pytest.mark.parametrize('given', ['', 'cuda'])
def test_no_rank_touches_a_gpu_but_its_own(given, monkeypatch):
    """Under torchrun on CUDA, the device check before train.py sets each rank's device used to
    allocate on 'cuda', GPU 0, from every rank: each rank opened a context there. Now rank 3 of a
    machine touches only cuda:3 (CUDA stood in for: this machine has none)."""
    import guards
    touched = []
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch, 'empty', lambda *a, device=None, **kw: touched.append(device) or torch.zeros(1))
    monkeypatch.setenv('LOCAL_RANK', '3')
    monkeypatch.setenv('RANK', '3')
    assert guards.get_device(given) == 'cuda:3'
    assert touched == ['cuda:3']
    monkeypatch.delenv('LOCAL_RANK')  # one process: the device as given
    monkeypatch.delenv('RANK')
    assert guards.get_device(given) == 'cuda' and touched[-1] == 'cuda'


# ---------------------------------------------------------------- the host reads the device once per log_interval
COUNTER = r'''
import json, os, runpy, sys
import torch, torch.distributed as dist
repo, out = os.path.realpath(sys.argv[1]), sys.argv[2]
steps, reads, reduces = [0], [], []
def counted(kind, real, log):
    def wrapper(*args, **kw):  # a read asked by the project's code (not torch's own internals;
        code = sys._getframe(1).f_code  # not get_batch's: its rows are drawn on the host)
        if os.path.realpath(code.co_filename).startswith(repo) and code.co_name != 'get_batch':
            log.append((steps[0], kind))
        return real(*args, **kw)
    return wrapper
for name in ('item', 'tolist', '__bool__', '__float__', '__int__', '__format__'):
    setattr(torch.Tensor, name, counted(name, getattr(torch.Tensor, name), reads))
dist.all_reduce = counted('all_reduce', dist.all_reduce, reduces)
from torch.optim.optimizer import register_optimizer_step_post_hook
register_optimizer_step_post_hook(lambda *a: steps.__setitem__(0, steps[0] + 1))
sys.argv, sys.path[0] = ['train.py', *sys.argv[3:]], repo  # (as python train.py would)
try:
    runpy.run_path(os.path.join(repo, 'train.py'), run_name='__main__')
finally:
    with open(out, 'w') as f:
        json.dump(dict(reads=reads, reduces=reduces, steps=steps[0]), f)
'''
READ_STEPS = {1, 4, 8, 12}  # log_interval 4 (and iter 1), max_iters 12: the last step evaluates and saves


@work
def the_host_reads_the_device_once_per_log_interval(d):
    make_data(d)
    (d / 'counter.py').write_text(COUNTER)
    args = [*TINY, '--max_iters=12', '--log_interval=4', '--eval_interval=1000', '--act=False',
            '--supervise=(1,)']
    alone = subprocess.run([sys.executable, 'counter.py', str(REPO), 'alone.json', *args], cwd=d,
                           env=ENV, capture_output=True, text=True)
    env = {**ENV, 'WORLD_SIZE': '2', 'LOCAL_WORLD_SIZE': '2', 'MASTER_ADDR': '127.0.0.1',
           'MASTER_PORT': str(master_port())}
    ranks = [subprocess.Popen([sys.executable, 'counter.py', str(REPO), f'rank{r}.json', *args,
                               '--gradient_accumulation_steps=2', '--backend=gloo', '--out_dir=ddp'],
                              cwd=d, env={**env, 'RANK': str(r), 'LOCAL_RANK': str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in (0, 1)]
    said = [p.communicate(timeout=PATIENCE)[0] for p in ranks]
    return alone, said, [json.loads((d / f).read_text()) for f in ('alone.json', 'rank0.json', 'rank1.json')]


def test_the_host_reads_the_device_once_per_log_interval(job):
    """nanoGPT's habit: between log lines the device runs on. Counted over 12 steps (the reads the
    project's code asks for: .item(), .tolist(), bool(), float(), int(), format; and its own
    all_reduce calls): only after steps 1, 4, 8 and 12 (the last: its evaluation and save too), one
    all_reduce at each under DDP (the gradients' own go through DDP, not through all_reduce)."""
    alone, said, counts = job
    assert alone.returncode == 0, alone.stderr
    for count in counts:
        assert count['steps'] == 12, said
        during = {step for step, _ in count['reads'] if 0 < step < 12}
        assert during <= READ_STEPS and {1, 4, 8} <= during, count['reads']
    assert counts[0]['reduces'] == []  # one process: no collective at all
    for rank in counts[1:]:
        assert [step for step, _ in rank['reduces']] == sorted(READ_STEPS), rank['reduces']


# ---------------------------------------------------------------- a run leaves its record: out_dir/log.jsonl
@work
def a_run_leaves_its_log_and_a_resume_keeps_what_its_checkpoint_trained(d):
    make_data(d)
    args = [*TINY, '--log_interval=2', '--eval_interval=4']
    first = run(d, 'train.py', *args, '--max_iters=6')  # saves at 4 and 6: the log reaches 6
    log = (d / 'out' / 'log.jsonl').read_text()
    ckpt = torch.load(d / 'out' / 'ckpt.pt', weights_only=True)
    ckpt['iter_num'] = 4  # as if it had died after the save at 4: its log lines 5-6 are past it
    torch.save(ckpt, d / 'out' / 'ckpt.pt')
    return first, log, run(d, 'train.py', *args, '--max_iters=8', '--init_from=resume'), \
        (d / 'out' / 'log.jsonl').read_text()


def test_a_run_leaves_its_log_and_a_resume_keeps_what_its_checkpoint_trained(job):
    """One JSON line per log line (iter, loss, val_loss at an evaluation, lr, ms, tok_s, alphas),
    to plot; the log line says the time left; a resume drops the lines its checkpoint never
    trained (the run died after them) and goes on from there."""
    first, log, resumed, after = job
    assert re.search(r'tok/s, \dh\d\dm\d\ds left$', ok(first), re.M)
    records = [json.loads(line) for line in log.splitlines()]
    assert [r['iter'] for r in records] == [1, 2, 4, 6]
    assert [r['val_loss'] is not None for r in records] == [False, False, True, True]
    assert {'loss', 'lr', 'ms', 'tok_s', 'alphas'} <= set(records[0])
    ok(resumed)
    assert [json.loads(line)['iter'] for line in after.splitlines()] == [1, 2, 4, 6, 8]
