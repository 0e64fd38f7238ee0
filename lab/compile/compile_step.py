"""Compiled vs eager training step on CPU, for a plain, a phantom and an ACT model of cpu_single's
shape: train.py's own loop, its logged ms/iter after warm-up, and the graph breaks and recompiles
that TORCH_LOGS reports. Writes lab/compile/compile_step.md, never over one there.
$ OMP_NUM_THREADS=1 python lab/compile/compile_step.py   (needs data/topics_byte: prepare.py)
"""
import os, re, subprocess, sys, statistics
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # lab/
import page
write = page.measured(os.path.join(ROOT, 'lab', 'compile', 'compile_step.md'))
CONFIGS = ['cpu_plain', 'cpu_single', 'cpu_phantom', 'cpu_act']
ITERS, LOG = 120, 20  # ms/iter is the median of the log lines after the first 40 iterations
rows = ['| config | eager ms/iter | compiled ms/iter | compiled / eager | graph breaks | '
        'recompiles |', '| --- | --- | --- | --- | --- | --- |']
for name in CONFIGS:
    ms = {}
    for compiled in (False, True):
        out = f'/tmp/out-compile-{name}-{compiled}'
        cmd = [sys.executable, 'train.py', f'config/{name}.py', f'--out_dir={out}',
               f'--max_iters={ITERS}', f'--log_interval={LOG}', f'--eval_interval={ITERS}',
               '--eval_iters=1', f'--compile={compiled}', '--overwrite=True', '--dtype=float32']
        env = {**os.environ, 'TORCH_LOGS': 'graph_breaks,recompiles'}
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
        log = r.stdout + r.stderr
        times = [float(t) for it, t in re.findall(r'iter (\d+): loss .*?(\d+)ms/iter', log)
                 if int(it) > 40]
        ms[compiled] = statistics.median(times)
        if compiled:
            breaks = len(re.findall(r'Graph break', log))
            recompiles = len(re.findall(r'Recompiling function', log))
    rows.append(f'| {name} | {ms[False]:.0f} | {ms[True]:.0f} | {ms[True] / ms[False]:.2f}x | '
                f'{breaks} | {recompiles} |')
    print(rows[-1], flush=True)
write(f"`OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '')} python "
      "lab/compile/compile_step.py`, torch " + __import__('torch').__version__ + "\n\n"
      + '\n'.join(rows) + '\n')
