"""
Sample from a trained tied-depth model, optionally at another depth or showing each token's depth:
$ python sample.py --out_dir=out-smoke --start="ROMEO:" --n_loops=8 --show_depth=True
$ python sample.py --out_dir=out-cpu-single,out-cpu-sft  # side by side: same prompt and seed
(the study's settings: --top_k=50 --top_p=0.9 --repetition_penalty=1.2 --temperature=1.0)
"""
import os, sys, time
import guards  # (first: its one handler covers the imports too, Ctrl-C included)
import torch
from model import GPT
from decode import autocast, generate
from depthmap import legend, painted, mark
from prepare import get_tokenizer

out_dir = 'out'  # or several: out-a,out-b
start = "\n"  # the prompt, or "FILE:prompt.txt" to read it from a file
num_samples = 3
max_new_tokens = 200
temperature = 0.8  # 0 = greedy: always the most likely token
top_k = 200  # 0 = off
top_p = 1.0  # nucleus sampling; 1.0 = off
repetition_penalty = 1.0
n_loops = None  # None = the trained depth; an int for every segment, or a tuple (one per segment)
exit_at = ''  # per-token exit: '' (off), 'maxprob:0.9' or 'resid:0.05'
show_depth = False  # colour new tokens by loop depth (with exit_at or ACT each token its own)
seed = 1337
device = ''  # '' = cuda if available, else cpu
dtype = ''  # '' = the dtype the model was trained with
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'configurator.py')).read())
# -----------------------------------------------------------------------------
device = guards.get_device(device)
start = guards.read_prompt(start)  # the text, or with FILE:path the file's

def load(out_dir):  # a model and what sampling it needs: each option checked for this model
    path = os.path.join(out_dir, 'ckpt.pt')
    model, ckpt = guards.load_checkpoint(path, GPT.from_checkpoint, device)
    max_depth = sum(model.depths(n_loops))  # (one depth for all, or one each)
    exit = guards.parse_exit(exit_at, model.config, f'the model in {out_dir}') if exit_at else None
    encode, decode, _ = get_tokenizer(ckpt['meta']['tokenizer'])
    _, ctx, precision = autocast(device, dtype, True, ckpt['config'].get('dtype', ''))
    return model.eval(), max_depth, exit, ctx, precision, encode(start), decode

names = guards.folders(out_dir)  # several models, each under its name (one twice: ok)
models = [load(name) for name in names]  # all checked before the first sample
for name, (model, max_depth, exit, ctx, precision, ids, decode) in zip(names, models):
    if len(names) > 1:
        print(f"=== {name} ===")
    torch.manual_seed(seed)  # the same for every model: side by side, only the model differs
    print(precision, file=sys.stderr)  # stderr: stdout stays just the samples
    if len(ids) > (T := model.config.block_size):  # the model sees at most block_size tokens
        print(f"the prompt has {len(ids)} tokens; keeping the last {T} (block_size)",
              file=sys.stderr)
    x = torch.tensor(ids[-T:], dtype=torch.long, device=device)[None]
    colour = sys.stdout.isatty()  # a terminal: the depth as colour; a file or a pipe: as text
    if show_depth:
        print(legend(max_depth) if colour else "loop depth: under each character, 1-9, then a=10")
    with ctx:  # (decode.generate runs without autograd)
        for _ in range(num_samples):
            t0 = time.perf_counter()
            y, depth = generate(model, x, max_new_tokens, temperature=temperature,
                                top_k=top_k or None, top_p=top_p,
                                repetition_penalty=repetition_penalty, n_loops=n_loops, exit=exit)
            new = y[0, x.size(1):].tolist()  # (.tolist() waits for the GPU: the clock is honest)
            speed = f"{len(new)} tokens, {len(new) / (time.perf_counter() - t0):.1f} tok/s"
            if exit or model.config.act:  # each token its own depth: what it spent, of the most
                speed += f", mean depth {depth.float().mean():.2f} of {max_depth}"
            print(f"[{speed}]", file=sys.stderr)
            prompt, text = decode(x[0].tolist()), decode(new)
            if show_depth and colour:
                print(prompt + painted(new, depth[0], decode, max_depth))
            elif show_depth:  # a file or a pipe: under each line, its characters' depths
                marks = ''.join(c if c == '\n' else ' ' for c in prompt)  # (the prompt: blank)
                marks += painted(new, depth[0], decode, max_depth, mark)
                lines = zip((prompt + text).split('\n'), marks.split('\n'))
                print('\n'.join(f"{line}\n{under}" for line, under in lines))
            else:
                print(prompt + text)
            print('---------------')
