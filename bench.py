"""
What depth costs, in one table; every row is measured in the same run, so compare ratios, not absolute numbers:
- training step: the tied loop (one block, k iterations) vs a plain stack of k distinct blocks of the same width;
- phantom vs full backprop at several k: step time and memory;
- generation: tokens/s re-encoding the context, with the KV cache, and with the KV cache + each exit policy;
- model FLOPs per token and the FLOP/s achieved (on CUDA, MFU against the GPU's bf16 peak).
$ python bench.py                                  (CPU, random weights, 5.5 min here)
$ python bench.py --init_from=out-cpu-v13          (generation rows from a trained model: exits see real confidence)
$ python bench.py --device=cuda --compile=True     (bf16; compile applies to the training rows)
"""
import os
import sys
import time
from contextlib import nullcontext
import torch
from model import GPTConfig, GPT, load_checkpoint, parse_exit
from prepare import get_tokenizer

# training rows: [n_prelude std][loop x k][n_coda std], batch_size x block_size tokens per step
batch_size = 16
block_size = 128
n_embd = 256
n_head = 4
n_prelude = 1
n_coda = 1
vocab_size = 257  # byte-level
k = 30  # tied loop vs plain stack at this depth
phantom_ks = (1, 8, 30)
# generation rows: a v13-shaped model (random weights at n_embd), or the model in init_from/ckpt.pt
gen_loops = (10, 10, 10)
init_from = ''
prompt = "Question: Tom has 12 apples and buys 7 more. How many now? A:"
gen_tokens = 256
exit_at = 'maxprob:0.9,resid:0.05'  # one generation row per exit policy (an ACT model: its gate)
repeats = 5  # median of this many timed rounds, after one warm-up
device = ''
compile = False
peak_flops = 0.0  # the GPU's dense bf16 FLOP/s for MFU; 0 = look it up by name below
seed = 1337
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'configurator.py')).read())
# -----------------------------------------------------------------------------
device = device or ('cuda' if torch.cuda.is_available() else 'cpu')
cuda = 'cuda' in device
ctx = torch.autocast('cuda', dtype=torch.bfloat16) if cuda else nullcontext()
sync = torch.cuda.synchronize if cuda else (lambda: None)
BF16_PEAK = {'H100': 989e12, 'H200': 989e12, 'A100': 312e12, 'L4': 121e12, '4090': 165e12, '3090': 71e12}
if cuda and not peak_flops:
    peak_flops = next((v for n, v in BF16_PEAK.items() if n in torch.cuda.get_device_name()), 0.0)

def model_for(**kw):
    torch.manual_seed(seed)
    shape = dict(block_size=block_size, vocab_size=vocab_size, n_embd=n_embd, n_head=n_head,
                 n_prelude=n_prelude, n_coda=n_coda)
    return GPT(GPTConfig(**{**shape, **kw})).to(device)

def train_flops_per_token(model):
    """nanoGPT's estimate for forward + backward, 6N + 12 L d T, with the tied block counted once per iteration."""
    c = model.config
    n = model.num_params()[1] - model.wpe.weight.numel()
    return 6 * n + 12 * (c.n_prelude + sum(c.loops) + c.n_coda) * c.n_embd * c.block_size

def activation_mb(model):
    """Bytes autograd keeps for backward (CPU memory measure): each storage once, the weights left out."""
    x = torch.randint(vocab_size, (batch_size, block_size), device=device)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = {}
    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in weights:
            saved[s.data_ptr()] = s.nbytes()
        return t
    with ctx, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _, loss, _ = model(x, x)
    del loss
    return sum(saved.values()) / 2**20

def time_steps(models):
    """ms of a forward + backward of each model, the median of `repeats` rounds in which the models take turns;
    each model's median per-round time ratio to the first (drift on a shared machine hits both alike); and the
    peak CUDA MB of each."""
    x = torch.randint(vocab_size, (batch_size, block_size), device=device)
    steps = [torch.compile(m) if compile else m for m in models]
    times, peaks = [[] for _ in models], [None] * len(models)
    for r in range(repeats + 1):  # round 0 warms up (and compiles)
        for i, m in enumerate(steps):
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            sync(); t0 = time.perf_counter()
            with ctx:
                _, loss, _ = m(x, x)
            loss.backward()
            sync(); times[i].append(1000 * (time.perf_counter() - t0))
            models[i].zero_grad(set_to_none=True)
            peaks[i] = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
    median = lambda v: sorted(v)[len(v) // 2]
    return ([median(t[1:]) for t in times], [median([a / b for a, b in zip(t[1:], times[0][1:])]) for t in times],
            peaks)

def gen_speeds(settings):
    """-> tokens/s of gen_tokens greedy tokens after the prompt for each (kv_cache, exit) setting, the median of
    `repeats` rounds in which the settings take turns, and the mean loop depth per new token of each."""
    speeds, depths = [[] for _ in settings], []
    with ctx:
        for r in range(repeats + 1):  # round 0 warms up, on 2 tokens
            n, depths = (2 if r == 0 else gen_tokens), []
            for i, (kv_cache, exit) in enumerate(settings):
                sync(); t0 = time.perf_counter()
                _, depth = gen.generate(start, n, top_k=1, exit=exit, kv_cache=kv_cache, return_depth=True)
                sync(); speeds[i].append(n / (time.perf_counter() - t0))
                depths.append(depth.float().mean().item())
    return [sorted(v[1:])[len(v[1:]) // 2] for v in speeds], depths

# the generation model first, so a bad setting fails before minutes of measuring
ids = list(prompt.encode())  # random weights: byte tokens
if init_from:  # a trained model, and a text prompt in its tokenizer, so the exit policy sees real confidence
    gen, ckpt = load_checkpoint(os.path.join(init_from, 'ckpt.pt'), device)
    ids = get_tokenizer(ckpt['meta']['tokenizer'])[0](prompt)
else:
    gen = model_for(loops=gen_loops, block_size=len(ids) + gen_tokens)
gen.eval()
c = gen.config
if len(ids) + gen_tokens > c.block_size:
    raise ValueError(f"prompt + gen_tokens = {len(ids)} + {gen_tokens} tokens is more than the model's block_size "
                     f"{c.block_size}: lower them (past block_size every step re-encodes, which is not what to time)")
start = torch.tensor([ids], device=device)
policies = {'ACT gate': None} if gen.config.act else {'exit ' + e: parse_exit(e) for e in exit_at.split(',')}

where = torch.cuda.get_device_name() if cuda else f"{device}, {torch.get_num_threads()} threads"
print(f"$ python {' '.join(sys.argv)}")
print(f"{where}, torch {torch.__version__}, {'bf16' if cuda else 'float32'}, compile={compile}; median of {repeats}")
print(f"training: batch {batch_size} x {block_size}, d={n_embd}, {n_head} heads, vocab {vocab_size}; "
      f"generation: {'init_from=' + init_from if init_from else 'random weights'}, [{c.n_prelude}]"
      f"{''.join(f'[x{kk}]' for kk in c.loops)}[{c.n_coda}] d={c.n_embd}, {len(ids)}-token prompt, greedy\n")
print("| row | ms/step | tokens/s | memory MB | MFLOP/token | TFLOP/s | ratio |\n| --- | --- | --- | --- | --- | --- | --- |")

def add(what, ms, mb=None, flops=None, against=''):  # one training row, printed as soon as it is measured
    tps = batch_size * block_size / ms * 1000
    perf = '' if flops is None else f"{flops * tps / 1e12:.3f}" + (f" ({flops * tps / peak_flops:.1%} MFU)" if peak_flops else '')
    row = (what, f"{ms:.1f}", f"{tps:,.0f}", '' if mb is None else f"{mb:.1f}", '' if flops is None else f"{flops / 1e6:.0f}",
           perf, against)
    print("| " + " | ".join(row) + " |", flush=True)

# 1. tied loop vs a plain stack of the same FLOPs
tied, plain = model_for(loops=(k,)), model_for(loops=(), n_prelude=n_prelude + k)
(t_plain, t_tied), (_, ratio), _ = time_steps([plain, tied])
add(f"train: plain stack, {n_prelude + k + n_coda} distinct blocks", t_plain, flops=train_flops_per_token(plain))
add(f"train: tied loop [{n_prelude}][A x{k}][{n_coda}]", t_tied, flops=train_flops_per_token(tied),
    against=f"{ratio:.3f}x plain's time")
del tied, plain

# 2. phantom vs full backprop
for kk in phantom_ks:
    full, phantom = model_for(loops=(kk,)), model_for(loops=(kk,), phantom=True)
    (t_full, t_ph), (_, ratio), peaks = time_steps([full, phantom])
    mb_full, mb_ph = peaks if cuda else (activation_mb(full), activation_mb(phantom))
    add(f"train k={kk}: full backprop", t_full, mb_full, flops=train_flops_per_token(full))
    add(f"train k={kk}: phantom", t_ph, mb_ph, against=f"{ratio:.2f}x time, {mb_ph / mb_full:.2f}x memory of full")
    del full, phantom

# 3. generation
settings = [(False, None), (True, None)] + [(True, p) for p in policies.values()]
(plain_tps, cached_tps, *exit_tps), (_, _, *depths) = gen_speeds(settings)
gen_row = lambda what, tps, against='': print(f"| {what} | {1000 / tps:.1f} / token | {tps:.1f} |  |  |  | {against} |")
gen_row(f"generate {gen_tokens}: re-encoding the context", plain_tps)
gen_row(f"generate {gen_tokens}: KV cache", cached_tps, f"{cached_tps / plain_tps:.1f}x re-encoding")
for what, tps, mean_depth in zip(policies, exit_tps, depths):
    gen_row(f"generate {gen_tokens}: KV cache + {what}, mean depth {mean_depth:.1f}/{sum(c.loops)}", tps,
            f"{tps / plain_tps:.1f}x re-encoding, {tps / cached_tps:.2f}x cache")
print(f"\nmemory: {'peak CUDA MB allocated' if cuda else 'MB of activations saved for backward'}; MFLOP/token: "
      f"forward + backward, 6N + 12LdT (N, L: parameters and block applications, the tied block once per iteration)")
