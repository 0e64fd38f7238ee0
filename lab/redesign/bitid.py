"""Issue 38's guard: the redesign changes how the code reads, never what it computes. Trains 12
steps of each model below in two checkouts (A: before, B: after) on the same data and seed,
then compares the weights (max abs difference: must be 0.0), and for each trained model
eval.py's eval.json and sample.py's stdout (same checkpoint, same seed: must be byte-identical).
What left the code on purpose is left out of the comparison: the absolute-residual probe (an
eval.json key) and the logit lens (sample.py --show_depth at a fixed depth), at 7269680; and what
came in or moved: eval.json's record of its settings and machine ('settings'), and the
'Overriding: ...' lines, which now go to stderr, and --show_depth's colours, which a pipe no
longer gets (the samples' text is compared).
$ python lab/redesign/bitid.py A B [smoke,cpu_act]   (two checkouts; data from A/data)
Writes lab/redesign/bitid.md (of the checkout it runs from), never over one there."""
import os, re, sys, json, subprocess, tempfile
import torch
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # lab/
import page

CONFIGS = ['smoke', 'cpu_single', 'cpu_multi', 'cpu_phantom', 'cpu_sandwich3', 'cpu_plain',
           'cpu_act', 'cpu_exit', 'cpu_sft']  # cpu_sft fine-tunes cpu_single's 12 steps
if len(sys.argv) > 3:  # some of them: smoke,cpu_act (a quick check that it can fail)
    CONFIGS = sys.argv[3].split(',')
STEPS = ['--max_iters=12', '--lr_decay_iters=12', '--warmup_iters=4', '--eval_interval=12',
         '--eval_iters=2', '--log_interval=4']
A, B = (os.path.abspath(p) for p in sys.argv[1:3])
HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lab', 'redesign')
# the whole check writes its page (checked now, before the work); some of the configs print only
write = page.measured(os.path.join(HERE, 'bitid.md')) if len(sys.argv) <= 3 else None
ENV = {**os.environ, 'OMP_NUM_THREADS': '1'}

def sh(tree, work, *args):
    r = subprocess.run([sys.executable, os.path.join(tree, args[0]), *args[1:]], cwd=work,
                       env=ENV, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{tree}: {' '.join(args)} failed:\n{r.stderr[-2000:]}")
    return r.stdout

def runs(tree, work):
    """-> {config: (weights, eval.json text, sample stdout)}, every run in work/out-<config>."""
    os.symlink(os.path.join(A, 'data'), os.path.join(work, 'data'))
    out = {}
    for name in CONFIGS:
        args = [os.path.join(tree, 'config', f'{name}.py'), *STEPS, f'--out_dir=out-{name}']
        if name == 'cpu_sft':
            args.append('--init_from=out-cpu_single')
        sh(tree, work, 'train.py', *args)
        ckpt = torch.load(os.path.join(work, f'out-{name}', 'ckpt.pt'), weights_only=True)
        sh(tree, work, 'eval.py', f'--out_dir=out-{name}', '--eval_iters=2', '--max_docs=4')
        with open(os.path.join(work, f'out-{name}', 'eval.json')) as f:
            report = f.read()
        shown = ['--show_depth=True'] if name == 'cpu_act' else []  # (fixed depth: the lens, gone)
        text = sh(tree, work, 'sample.py', f'--out_dir=out-{name}', '--num_samples=2',
                  '--max_new_tokens=40', *shown)
        out[name] = ckpt['model'], report, text
    return out

with tempfile.TemporaryDirectory() as wa, tempfile.TemporaryDirectory() as wb:
    before, after = runs(A, wa), runs(B, wb)
rows = ['| config | max abs weight difference | eval.json | sample.py stdout |',
        '| --- | --- | --- | --- |']
for name in CONFIGS:
    (wa, ea, sa), (wb, eb, sb) = before[name], after[name]
    sa = ''.join(line for line in sa.splitlines(True) if not line.startswith('Overriding'))
    if name == 'cpu_act':  # --show_depth into a pipe: no colours now, the depths under the text
        sa = re.sub(r'\x1b\[[0-9;]*m', '', sa).split('\n', 1)[1]  # (the legends differ)
        sb = re.sub(r'(?m)^ *[1-9a-z]+\n', '', sb).split('\n', 1)[1]
    ea, eb = json.loads(ea), json.loads(eb)
    ea['probes'].pop('absolute residual', None)
    eb.pop('settings', None)  # (what a report was computed with, where: recorded since 2026-12)
    # (json.dump's own layout: the same text when nothing else differs)
    ea, eb = json.dumps(ea, indent=2), json.dumps(eb, indent=2)
    same_keys = set(wa) == set(wb)
    diff = max((wa[k] - wb[k]).abs().max().item() for k in wa) if same_keys else float('nan')
    rows.append(f"| {name} | {diff if same_keys else 'other tensors: ' + str(set(wa) ^ set(wb))}"
                f" | {'identical' if ea == eb else 'DIFFERS'} | "
                f"{'identical' if sa == sb else 'DIFFERS'} |")
commit = lambda t: subprocess.run(['git', '-C', t, 'rev-parse', '--short', 'HEAD'],
                                  capture_output=True, text=True).stdout.strip()
text = (f"# Bit-identical across the redesign\n\n`python lab/redesign/bitid.py A B`, A at "
        f"{commit(A)}, B at {commit(B)} (B's working tree as it was): 12 steps of each config, "
        "seed 1337, one thread.\n\n" + '\n'.join(rows) + '\n')
if write:
    write(text)
print(text)
