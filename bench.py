"""
What depth costs, in one table; every row is measured in the same run: compare ratios, not
absolute numbers.
- training step: the tied loop (one block, k iterations) vs a plain stack of k distinct blocks;
- the tied loop's step in float32 vs bfloat16 autocast, at n_embd and at each of dtype_widths
  (on a CPU with bf16 instructions, bf16 pays from between d=128 and d=192);
- phantom vs full backprop at several k: step time and memory;
- generation: tokens/s re-encoding the context (model.generate), with the KV cache at full depth,
  and with the KV cache + each per-token policy (each exit; an ACT model's gate): its mean depth,
  the tied-block calls counted, and its speedup against the ideal (the blocks a new token runs at
  full depth over those it runs under the policy);
- model FLOPs per token and the FLOP/s achieved (on CUDA, MFU against the GPU's bf16 peak).
$ python bench.py                              (CPU, random weights)
$ python bench.py --init_from=out-cpu-v13,out-cpu-v13-act  (trained: the exits see real confidence)
$ python bench.py --device=cuda --compile=True (bf16; compile applies to the training rows)
$ python bench.py --dtype_widths=(64,96,128)   (float32 vs bf16 at more widths: the crossover)
Or, measuring nothing, the paper configs' sizes for a GPU (README: GPU estimates):
$ python bench.py --estimate=v3,v4,v5,v6,v7,v9,v12,v13,v14,act
"""
import os
import sys
import time
import shlex
import torch
from model import GPTConfig, GPT, Block
from decode import autocast, generate
import guards
from guards import InputError, get_device, load_checkpoint, parse_exit
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
dtype_widths = ()  # float32 vs bf16 rows of the tied loop at n_embd and at these widths too
# generation rows: a v13-shaped model (random weights at n_embd), or each of init_from=a,b,...
gen_loops = (10, 10, 10)
init_from = ''
prompt = "Question: Tom has 12 apples and buys 7 more. How many now? A:"
gen_tokens = 256
exit_at = 'maxprob:0.9,resid:0.05'  # one generation row per exit policy (an ACT model: its gate)
repeats = 5  # median of this many timed rounds, after one warm-up
device = ''
dtype = ''  # '' = bfloat16 autocast on CUDA and on CPUs with bf16 instructions, else float32
compile = False
peak_flops = 0.0  # the GPU's dense bf16 FLOP/s for MFU; 0 = look it up by name below
seed = 1337
estimate = ''  # config names (v3,v5,...): print their parameters, tokens and memory per step
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'configurator.py')).read())
# -----------------------------------------------------------------------------
device = get_device(device)
cuda = 'cuda' in device
FP32, BF16 = (torch.autocast('cuda' if cuda else 'cpu', torch.bfloat16, enabled=on)
              for on in (False, True))  # each reusable: the contexts the dtype rows compare
# the training rows' dtype, and the generation rows' (on a CPU: float32 decodes faster)
(_, ctx, precision), (_, gen_ctx, gen_precision) = (
    autocast(device, dtype, decode) for decode in (False, True))
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
    """nanoGPT's forward + backward estimate, 6N + 12 L d T, the tied block once per iteration."""
    c = model.config
    _, n_applied = model.num_params()
    n = n_applied - model.wpe.weight.numel()  # as nanoGPT, without the position embeddings
    n_layers = c.n_prelude + sum(c.loops) + c.n_coda
    return 6 * n + 12 * n_layers * c.n_embd * c.block_size

def activation_mb(model, rows=batch_size, context=None):
    """MB autograd keeps for backward (the CPU memory measure): each storage once, no weights;
    for rows rows of the model's block_size tokens, in context (default: ctx)."""
    x = torch.randint(model.config.vocab_size, (rows, model.config.block_size), device=device)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = {}  # storage address -> bytes
    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            saved[storage.data_ptr()] = storage.nbytes()
        return t
    with context or ctx, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x, x)  # (the graph is dropped at once)
    return sum(saved.values()) / 2**20

def time_steps(models, contexts=None):
    """A forward + backward of each model (in its context; default ctx), the models taking turns
    over `repeats` rounds so that drift on a shared machine hits them alike. -> the median ms of
    each, the median of its per-round time ratio to the first model's, its peak CUDA MB or None."""
    contexts = contexts or [ctx] * len(models)
    x = torch.randint(vocab_size, (batch_size, block_size), device=device)
    steps = [torch.compile(m) if compile else m for m in models]
    times, peaks = [[] for _ in models], [None] * len(models)
    for r in range(repeats + 1):  # round 0 warms up (and compiles)
        for i, step in enumerate(steps):
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            sync()
            t0 = time.perf_counter()
            with contexts[i]:
                loss = step(x, x)[1]
            loss.backward()
            sync()
            times[i].append(1000 * (time.perf_counter() - t0))
            models[i].zero_grad(set_to_none=True)
            if cuda:
                peaks[i] = torch.cuda.max_memory_allocated() / 2**20
    times = [t[1:] for t in times]  # without the warm-up
    ms = [median(t) for t in times]
    ratios = [median([a / b for a, b in zip(t, times[0])]) for t in times]
    return ms, ratios, peaks

def count_blocks(model):
    """Hooks that count the Block calls on a new token decoded alone (one token against a filled
    cache): every block, and the tied ones. -> the counts (a dict) and the hooks' handles."""
    counts = {'blocks': 0, 'tied': 0}
    tied = [s.block for s in model.segments]
    def hook(block, args, out):
        x, cache = args[:2]
        if x.size(1) == 1 and cache is not None and cache.pos > 0:
            counts['blocks'] += 1
            counts['tied'] += any(block is t for t in tied)
    return counts, [b.register_forward_hook(hook) for b in model.modules() if isinstance(b, Block)]

def gen_speeds(settings):
    """gen_tokens greedy tokens by each (model, start, exit), taking turns over `repeats` rounds
    (round 0 warms up, untimed, and counts block calls); exit 're-encode': model.generate, nanoGPT's
    (no cache), else decode.generate. -> each one's median tokens/s, and per token decoded alone
    (not the first): the mean depth it reports, tied and all block calls."""
    speeds = [[] for _ in settings]
    counts, depths = [None] * len(settings), [None] * len(settings)
    with gen_ctx:
        for r in range(repeats + 1):
            for i, (model, start, exit) in enumerate(settings):
                counts[i], hooks = count_blocks(model) if r == 0 else (counts[i], [])
                sync()
                t0 = time.perf_counter()
                if exit == 're-encode':
                    model.generate(start, gen_tokens, top_k=1)
                else:
                    depths[i] = generate(model, start, gen_tokens, top_k=1, exit=exit)[1]
                sync()
                speeds[i].append(gen_tokens / (time.perf_counter() - t0))
                for h in hooks:
                    h.remove()
    n = gen_tokens - 1
    return [(median(s[1:]), d if d is None else d[:, 1:].float().mean().item(), c['tied'] / n,
             c['blocks'] / n)
            for s, d, c in zip(speeds, depths, counts)]

def print_row(*cells):
    print("| " + " | ".join(cells) + " |", flush=True)

def train_row(what, ms, mb=None, flops=None, ratio=''):
    """One training row, printed as soon as it is measured."""
    tps = batch_size * block_size / ms * 1000  # tokens/s
    mfu = f" ({flops * tps / peak_flops:.1%} MFU)" if flops and peak_flops else ''
    cells = ['', ''] if flops is None else [f"{flops / 1e6:.0f}", f"{flops * tps / 1e12:.3f}{mfu}"]
    print_row(what, f"{ms:.1f}", f"{tps:,.0f}", '' if mb is None else f"{mb:.1f}", *cells, ratio)

def gen_row(what, tokens_per_s, ratio=''):
    print_row(what, f"{1000 / tokens_per_s:.1f} / token", f"{tokens_per_s:.1f}", '', '', '', ratio)

def config_path(name):  # --estimate's names: the configs in config/
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'config', f'{name}.py')
    if not os.path.isfile(path):
        raise InputError(f"--estimate={name}: no config/{name}.py; name configs of config/, "
                         "e.g. --estimate=v3")
    return path

def estimates(names):
    """Per paper config, what a GPU run needs: parameters (distinct, and with each tied block
    counted per iteration), tokens and FLOPs per optimizer step (6N + 12LdT a token), and the
    activations autograd keeps in one micro-step, float32 and bf16: measured here for one row,
    times the rows (each saved tensor grows with the batch; weights, AdamW state, grads on top)."""
    paths = {name: config_path(name) for name in names.split(',')}  # each checked before work
    print("| config | params: distinct / unrolled | tokens/step | TFLOP/step | "
          "activations: float32 / bf16 |\n| --- | --- | --- | --- | --- |")
    for name, path in paths.items():
        s = guards.run_config(path, {})  # include() as train.py sees it
        keys = {k: v for k, v in s.items() if k in GPTConfig.__dataclass_fields__}
        torch.manual_seed(seed)
        model = GPT(GPTConfig(**keys, vocab_size=50257)).to(device)  # fineweb: GPT-2's vocab
        distinct, unrolled = model.num_params()
        tokens = s['batch_size'] * s['block_size'] * s.get('gradient_accumulation_steps', 1)
        mb = [s['batch_size'] * activation_mb(model, 1, c) / 1024 for c in (FP32, BF16)]
        print(f"| `{name}.py` | {distinct / 1e6:.1f}M / {unrolled / 1e6:.1f}M | {tokens:,} | "
              f"{tokens * train_flops_per_token(model) / 1e12:.1f} | "
              f"{mb[0]:.1f} / {mb[1]:.1f} GiB |", flush=True)

if estimate:
    estimates(estimate)
    sys.exit(0)
# the generation models first, so that a bad setting fails before minutes of measuring: groups of
# (name, a model at full depth, the prompt in its tokenizer, [(policy, the model it runs, exit)])
exits = {e: parse_exit(e) for e in exit_at.split(',')}
groups = []
if not init_from:  # random weights, byte tokens; and the same shape with an ACT gate, whose initial
    ids = list(prompt.encode())  # bias runs every token to the max: what the gate's check costs
    rand = model_for(loops=gen_loops, block_size=len(ids) + gen_tokens)
    rand_act = model_for(loops=gen_loops, block_size=len(ids) + gen_tokens, act=True)
    policies = [('exit ' + e, rand, exit) for e, exit in exits.items()]
    groups.append(('random weights', rand, ids, policies + [('ACT gate', rand_act, None)]))
for path in filter(None, init_from.split(',')):  # trained models: the exits see real confidence
    model, ckpt = load_checkpoint(os.path.join(path, 'ckpt.pt'), GPT.from_checkpoint, device)
    ids = get_tokenizer(ckpt['meta']['tokenizer'])[0](prompt)
    full, policies = model, [('ACT gate', model, None)]  # it stops by its gate, or by its exits
    if model.config.act:  # at full depth: the same blocks, no gate
        full = GPT(GPTConfig(**{**ckpt['model_args'], 'act': False})).to(device)
        full.load_state_dict(ckpt['model'], strict=False)
    else:
        policies = [('exit ' + e, model, parse_exit(e, model.config)) for e in exits]
    groups.append((path, full, ids, policies))
for name, full, ids, policies in groups:
    for m in [full] + [m for _, m, _ in policies]:
        m.eval()
    if len(ids) + gen_tokens > full.config.block_size:
        raise InputError(f"prompt + gen_tokens = {len(ids)} + {gen_tokens} tokens is more than "
                         f"{name}'s block_size {full.config.block_size}: lower them (past "
                         f"block_size every step re-encodes, which is not what to time)")

# the header: the command, the machine, the shapes
where = torch.cuda.get_device_name() if cuda else f"{device}, {torch.get_num_threads()} threads"
print(f"$ python {shlex.join(sys.argv)}")  # as typed: it runs again
print(f"{where}, torch {torch.__version__}, compile={compile}; median of {repeats}")
print(f"dtype: training rows {precision}; generation rows {gen_precision}")
print(f"training: batch {batch_size} x {block_size}, d={n_embd}, {n_head} heads, "
      f"vocab {vocab_size}")
for name, full, ids, _ in groups:
    c = full.config
    shape = f"[{c.n_prelude}]" + ''.join(f"[x{n}]" for n in c.loops) + f"[{c.n_coda}]"
    print(f"generation, {name}: {shape} d={c.n_embd}, {len(ids)}-token prompt, greedy")
print()
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

# 2. float32 vs bf16 autocast: the same model (same init), each step in either context
for width in (n_embd, *dtype_widths):
    fp32, bf16 = model_for(loops=(k,), n_embd=width), model_for(loops=(k,), n_embd=width)
    (ms_fp32, ms_bf16), (_, ratio), _ = time_steps([fp32, bf16], [FP32, BF16])
    flops = train_flops_per_token(fp32)
    train_row(f"train d={width} [{n_prelude}][A x{k}][{n_coda}]: float32", ms_fp32, flops=flops)
    train_row(f"train d={width} [{n_prelude}][A x{k}][{n_coda}]: bf16 autocast", ms_bf16,
              flops=flops, ratio=f"{1 / ratio:.2f}x float32's speed")
    del fp32, bf16

# 3. phantom vs full backprop: the phantom loop keeps the graph of its last steps only
for kk in phantom_ks:
    full = model_for(loops=(kk,))
    phantom = model_for(loops=(kk,), phantom=True)
    (ms_full, ms_phantom), (_, ratio), peaks = time_steps([full, phantom])
    # (a CPU has no peak-memory counter: count what autograd saves instead)
    mb_full, mb_phantom = peaks if cuda else (activation_mb(full), activation_mb(phantom))
    train_row(f"train k={kk}: full backprop", ms_full, mb_full, flops=train_flops_per_token(full))
    train_row(f"train k={kk}: phantom", ms_phantom, mb_phantom,
              ratio=f"{ratio:.2f}x time, {mb_phantom / mb_full:.2f}x memory of full")
    del full, phantom

# 4. generation: re-encoding (nanoGPT's generate) and the KV cache at full depth, then the KV cache
# + each policy. The ideal speedup of a policy: the blocks a new token runs, full depth / policy's
for name, full, ids, policies in groups:
    start = torch.tensor([ids], device=device)
    settings = [(full, start, 're-encode'), (full, start, None)]
    rows = gen_speeds(settings + [(m, start, exit) for _, m, exit in policies])
    (plain_tps, *_), (cached_tps, _, _, N), *rows = rows
    what = f"generate {gen_tokens}, {name}:"
    gen_row(f"{what} re-encoding the context", plain_tps)
    gen_row(f"{what} KV cache, {N:.1f} blocks/token", cached_tps,
            f"{cached_tps / plain_tps:.1f}x re-encoding")
    for (policy, m, _), (tps, depth, calls, n) in zip(policies, rows):
        ideal = N / n
        gen_row(f"{what} KV cache + {policy}, mean depth {depth:.2f}/{sum(m.config.loops)} "
                f"(tied-block calls {calls:.2f}), {n:.1f} blocks/token", tps,
                f"{tps / plain_tps:.1f}x re-encoding, {tps / cached_tps:.2f}x cache: "
                f"{tps / cached_tps / ideal:.0%} of the ideal {ideal:.2f}x")

memory = 'peak CUDA MB allocated' if cuda else 'MB of activations saved for backward'
print(f"\nmemory: {memory}; MFLOP/token: forward + backward, 6N + 12LdT (N, L: parameters and "
      f"block applications, the tied block once per iteration); generation: mean depth and "
      f"blocks per new token decoded alone (the first comes with the prompt's pass)")
