"""
What depth costs, in one table. Every row is measured in the same run, so compare ratios, not
absolute numbers:
- training step: the tied loop (one block, k iterations) vs a plain stack of k distinct blocks
  of the same width;
- phantom vs full backprop at several k: step time and memory;
- generation: tokens/s re-encoding the context, with the KV cache, and with the KV cache + each
  exit policy;
- model FLOPs per token and the FLOP/s achieved (on CUDA, MFU against the GPU's bf16 peak).
$ python bench.py                                (CPU, random weights, 5.5 min here)
$ python bench.py --init_from=out-cpu-v13        (generation rows from a trained model: the
                                                  exits see real confidence)
$ python bench.py --device=cuda --compile=True   (bf16; compile applies to the training rows)
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
# generation rows: a v13-shaped model (random weights at n_embd), or init_from/ckpt.pt
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
_valid = ['batch_size >= 1', 'block_size >= 1', 'k >= 1', 'all(kk >= 1 for kk in phantom_ks)',
          'gen_tokens >= 1', 'repeats >= 1', 'peak_flops >= 0']  # configurator.py checks them
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'configurator.py')).read())
# -----------------------------------------------------------------------------
device = device or ('cuda' if torch.cuda.is_available() else 'cpu')
cuda = 'cuda' in device
ctx = torch.autocast('cuda', dtype=torch.bfloat16) if cuda else nullcontext()
sync = torch.cuda.synchronize if cuda else (lambda: None)
BF16_PEAK = {'H100': 989e12, 'H200': 989e12, 'A100': 312e12, 'L4': 121e12, '4090': 165e12,
             '3090': 71e12}
if cuda and not peak_flops:
    gpu = torch.cuda.get_device_name()
    peak_flops = next((flops for name, flops in BF16_PEAK.items() if name in gpu), 0.0)

def median(values):
    return sorted(values)[len(values) // 2]

def model_for(**kw):
    """The bench's shape with kw changed; the same seed every time, so the same init."""
    torch.manual_seed(seed)
    shape = dict(block_size=block_size, vocab_size=vocab_size, n_embd=n_embd, n_head=n_head,
                 n_prelude=n_prelude, n_coda=n_coda)
    return GPT(GPTConfig(**{**shape, **kw})).to(device)

def train_flops_per_token(model):
    """nanoGPT's estimate for forward + backward, 6N + 12 L d T, with the tied block counted
    once per iteration."""
    c = model.config
    _, n_applied = model.num_params()
    n = n_applied - model.wpe.weight.numel()  # as nanoGPT, without the position embeddings
    n_layers = c.n_prelude + sum(c.loops) + c.n_coda
    return 6 * n + 12 * n_layers * c.n_embd * c.block_size

def activation_mb(model):
    """MB autograd keeps for backward (the CPU memory measure): each storage once, no weights."""
    x = torch.randint(vocab_size, (batch_size, block_size), device=device)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = {}  # storage address -> bytes
    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            saved[storage.data_ptr()] = storage.nbytes()
        return t
    with ctx, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _, loss, _ = model(x, x)
    del loss
    return sum(saved.values()) / 2**20

def time_step(model, x):
    """ms of one forward + backward."""
    sync()
    t0 = time.perf_counter()
    with ctx:
        _, loss, _ = model(x, x)
    loss.backward()
    sync()
    return 1000 * (time.perf_counter() - t0)

def time_steps(models):
    """Time a forward + backward of each model over `repeats` rounds in which the models take
    turns, so that drift on a shared machine hits them alike. -> the median ms of each; the median
    of each one's per-round time ratio to the first model; the peak CUDA MB of each (or None)."""
    x = torch.randint(vocab_size, (batch_size, block_size), device=device)
    steps = [torch.compile(m) if compile else m for m in models]
    times = [[] for _ in models]
    peaks = [None] * len(models)
    for r in range(repeats + 1):  # round 0 warms up (and compiles)
        for i, step in enumerate(steps):
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            times[i].append(time_step(step, x))
            models[i].zero_grad(set_to_none=True)
            if cuda:
                peaks[i] = torch.cuda.max_memory_allocated() / 2**20
    times = [t[1:] for t in times]  # without the warm-up
    ms = [median(t) for t in times]
    ratios = [median([a / b for a, b in zip(t, times[0])]) for t in times]
    return ms, ratios, peaks

def gen_speeds(model, start, settings):
    """Generate gen_tokens greedy tokens after start with each (kv_cache, exit) setting, over
    `repeats` rounds in which the settings take turns. -> the median tokens/s of each, and the
    mean loop depth per new token of each."""
    speeds = [[] for _ in settings]
    with ctx:
        for r in range(repeats + 1):
            n = 2 if r == 0 else gen_tokens  # round 0 warms up, on 2 tokens
            depths = []
            for i, (kv_cache, exit) in enumerate(settings):
                sync()
                t0 = time.perf_counter()
                _, depth = model.generate(start, n, top_k=1, exit=exit, kv_cache=kv_cache,
                                          return_depth=True)
                sync()
                speeds[i].append(n / (time.perf_counter() - t0))
                depths.append(depth.float().mean().item())
    return [median(s[1:]) for s in speeds], depths

def print_row(*cells):
    print("| " + " | ".join(cells) + " |", flush=True)

def train_row(what, ms, mb=None, flops=None, ratio=''):
    """One training row, printed as soon as it is measured."""
    tokens_per_s = batch_size * block_size / ms * 1000
    mb_cell = '' if mb is None else f"{mb:.1f}"
    flops_cell = '' if flops is None else f"{flops / 1e6:.0f}"
    perf_cell = '' if flops is None else f"{flops * tokens_per_s / 1e12:.3f}"
    if flops is not None and peak_flops:
        perf_cell += f" ({flops * tokens_per_s / peak_flops:.1%} MFU)"
    print_row(what, f"{ms:.1f}", f"{tokens_per_s:,.0f}", mb_cell, flops_cell, perf_cell, ratio)

def gen_row(what, tokens_per_s, ratio=''):
    print_row(what, f"{1000 / tokens_per_s:.1f} / token", f"{tokens_per_s:.1f}", '', '', '', ratio)

# the generation model first, so that a bad setting fails before minutes of measuring
ids = list(prompt.encode())  # random weights: byte tokens
if init_from:  # a trained model and the prompt in its tokenizer: the exits see real confidence
    gen, ckpt = load_checkpoint(os.path.join(init_from, 'ckpt.pt'), device)
    encode, _, _ = get_tokenizer(ckpt['meta']['tokenizer'])
    ids = encode(prompt)
else:
    gen = model_for(loops=gen_loops, block_size=len(ids) + gen_tokens)
gen.eval()
c = gen.config
if len(ids) + gen_tokens > c.block_size:
    raise ValueError(f"prompt + gen_tokens = {len(ids)} + {gen_tokens} tokens is more than the "
                     f"model's block_size {c.block_size}: lower them (past block_size every step "
                     f"re-encodes, which is not what to time)")
start = torch.tensor([ids], device=device)
if c.act:  # an ACT model stops by its own gate
    policies = {'ACT gate': None}
else:
    policies = {'exit ' + e: parse_exit(e) for e in exit_at.split(',')}

# the header: the command, the machine, the shapes
where = torch.cuda.get_device_name() if cuda else f"{device}, {torch.get_num_threads()} threads"
dtype = 'bf16' if cuda else 'float32'
weights = 'init_from=' + init_from if init_from else 'random weights'
gen_shape = f"[{c.n_prelude}]" + ''.join(f"[x{n}]" for n in c.loops) + f"[{c.n_coda}]"
print(f"$ python {' '.join(sys.argv)}")
print(f"{where}, torch {torch.__version__}, {dtype}, compile={compile}; median of {repeats}")
print(f"training: batch {batch_size} x {block_size}, d={n_embd}, {n_head} heads, "
      f"vocab {vocab_size}; generation: {weights}, {gen_shape} d={c.n_embd}, "
      f"{len(ids)}-token prompt, greedy\n")
print("| row | ms/step | tokens/s | memory MB | MFLOP/token | TFLOP/s | ratio |")
print("| --- | --- | --- | --- | --- | --- | --- |")

# 1. the tied loop vs a plain stack of the same FLOPs
tied = model_for(loops=(k,))
plain = model_for(loops=(), n_prelude=n_prelude + k)
(ms_plain, ms_tied), (_, ratio), _ = time_steps([plain, tied])
train_row(f"train: plain stack, {n_prelude + k + n_coda} distinct blocks", ms_plain,
          flops=train_flops_per_token(plain))
train_row(f"train: tied loop [{n_prelude}][A x{k}][{n_coda}]", ms_tied,
          flops=train_flops_per_token(tied), ratio=f"{ratio:.3f}x plain's time")
del tied, plain

# 2. phantom vs full backprop: the phantom loop keeps the graph of its last steps only
for kk in phantom_ks:
    full = model_for(loops=(kk,))
    phantom = model_for(loops=(kk,), phantom=True)
    (ms_full, ms_phantom), (_, ratio), peaks = time_steps([full, phantom])
    if cuda:
        mb_full, mb_phantom = peaks
    else:  # CPU has no peak-memory counter: count what autograd saves instead
        mb_full, mb_phantom = activation_mb(full), activation_mb(phantom)
    train_row(f"train k={kk}: full backprop", ms_full, mb_full, flops=train_flops_per_token(full))
    train_row(f"train k={kk}: phantom", ms_phantom, mb_phantom,
              ratio=f"{ratio:.2f}x time, {mb_phantom / mb_full:.2f}x memory of full")
    del full, phantom

# 3. generation: re-encoding, the KV cache, and the KV cache + each exit policy
settings = [(False, None), (True, None)] + [(True, p) for p in policies.values()]
speeds, depths = gen_speeds(gen, start, settings)
plain_tps, cached_tps, *exit_tps = speeds
_, _, *exit_depths = depths
gen_row(f"generate {gen_tokens}: re-encoding the context", plain_tps)
gen_row(f"generate {gen_tokens}: KV cache", cached_tps,
        f"{cached_tps / plain_tps:.1f}x re-encoding")
for policy, tps, depth in zip(policies, exit_tps, exit_depths):
    what = f"generate {gen_tokens}: KV cache + {policy}, mean depth {depth:.1f}/{sum(c.loops)}"
    gen_row(what, tps, f"{tps / plain_tps:.1f}x re-encoding, {tps / cached_tps:.2f}x cache")

memory = 'peak CUDA MB allocated' if cuda else 'MB of activations saved for backward'
print(f"\nmemory: {memory}; MFLOP/token: forward + backward, 6N + 12LdT (N, L: parameters and "
      f"block applications, the tied block once per iteration)")
