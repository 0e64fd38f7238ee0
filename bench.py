"""
Measure what depth costs: training step time and activation memory at several k, full backprop vs
phantom gradient, and generation speed with and without the KV cache. Ratios within one run are what
to trust on a shared machine.
$ python bench.py --ks=(1,4,12,24)   (defaults: config/cpu_single.py's shape)
"""
import os
import time
from contextlib import nullcontext
import torch
from model import GPTConfig, GPT

ks = (1, 4, 12, 24)  # loop depths to measure (every tied segment gets k)
batch_size = 16
block_size = 128
n_embd = 64
n_head = 4
n_prelude = 2
loops = (12,)  # the shape for the generation benchmark; the step benchmark uses k
n_coda = 2
vocab_size = 257
repeats = 3
gen_tokens = 64
device = ''
seed = 1337
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'configurator.py')).read())
# -----------------------------------------------------------------------------
device = device or ('cuda' if torch.cuda.is_available() else 'cpu')
ctx = torch.autocast('cuda', dtype=torch.bfloat16) if 'cuda' in device else nullcontext()
sync = torch.cuda.synchronize if 'cuda' in device else (lambda: None)

def train_step(phantom, k):
    """-> (ms per forward+backward, MB of activations saved for backward, peak CUDA MB or None)."""
    torch.manual_seed(seed)
    conf = GPTConfig(block_size=block_size, vocab_size=vocab_size, n_embd=n_embd, n_head=n_head, n_prelude=n_prelude,
                     loops=(k,) * len(loops), n_coda=n_coda, phantom=phantom)
    model = GPT(conf).to(device)
    x = torch.randint(vocab_size, (batch_size, block_size), device=device)
    saved = []
    def pack(t):  # count every tensor autograd keeps for the backward pass
        saved.append(t.numel() * t.element_size())
        return t
    times = []
    for r in range(repeats + 1):  # the first run warms up
        saved.clear()
        if 'cuda' in device:
            torch.cuda.reset_peak_memory_stats()
        sync(); t0 = time.perf_counter()
        with ctx, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            _, loss, _ = model(x, x)
        loss.backward()
        sync(); times.append(time.perf_counter() - t0)
        model.zero_grad(set_to_none=True)
    peak = torch.cuda.max_memory_allocated() / 2**20 if 'cuda' in device else None
    return 1000 * sorted(times[1:])[len(times[1:]) // 2], sum(saved) / 2**20, peak

def gen_speed(kv_cache):
    torch.manual_seed(seed)
    conf = GPTConfig(block_size=block_size, vocab_size=vocab_size, n_embd=n_embd, n_head=n_head, n_prelude=n_prelude,
                     loops=loops, n_coda=n_coda)
    model = GPT(conf).to(device).eval()
    x = torch.randint(vocab_size, (1, block_size - gen_tokens), device=device)  # a prompt filling the rest of the block
    with ctx:
        model.generate(x, 4, kv_cache=kv_cache)  # warm up
        sync(); t0 = time.perf_counter()
        model.generate(x, gen_tokens, kv_cache=kv_cache)
        sync()
    return gen_tokens / (time.perf_counter() - t0)

print(f"device {device}, batch {batch_size} x {block_size}, d={n_embd}, [{n_prelude} std][loop x k][{n_coda} std]")
print(f"{'k':>4} {'full ms':>9} {'phantom ms':>11} {'full act MB':>12} {'phantom act MB':>15} {'phantom/full mem':>17}" +
      (f" {'full peak MB':>13} {'phantom peak MB':>16}" if 'cuda' in device else ""))
for k in ks:
    (tf, mf, pf), (tp, mp, pp) = train_step(False, k), train_step(True, k)
    print(f"{k:>4} {tf:>9.1f} {tp:>11.1f} {mf:>12.1f} {mp:>15.1f} {mp / mf:>17.2f}" +
          (f" {pf:>13.0f} {pp:>16.0f}" if 'cuda' in device else ""))
with_cache, without = gen_speed(True), gen_speed(False)
print(f"generation at loops={loops}, {gen_tokens} tokens after a {block_size - gen_tokens}-token prompt: {with_cache:.1f} tok/s with KV cache, {without:.1f} without ({with_cache / without:.1f}x)")
