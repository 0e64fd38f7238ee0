"""
Depth-aware decoding, what model.py's plain generate leaves out (nanochat's engine.py split):
a KV cache with a slot for every block application and one rule for the slots a stopped token
skips (model.py's per-token exits: `model(idx, exit=('maxprob', 0.9))`), the sampling extras
(top_p, repetition penalty), cached generation that reports each token's depth; and autocast,
the dtype a script runs the model in.
"""
import torch
import torch.nn.functional as F

class KVCache:
    """Keys and values for generation, preallocated as in gpt-fast. Every block APPLICATION has a
    slot of its own (a tied block run k times has k), named by where it runs:
        ('prelude', j)              prelude block j
        (segment, i)                iteration i of tied segment `segment` (i = 0..k-1)
        ('coda', j)                 coda block j, in the model's own readout
        (segment, i, 'coda', j)     coda block j in a maxprob exit's check after that iteration
    The rule for a token that stopped early: its later slots hold its last run slot's keys and
    values, whether the prompt is prefilled in one chunk or fed a token at a time."""
    def __init__(self, block_size):
        self.block_size = block_size
        self.kv = {}  # slot -> (keys, values), each (B, heads, block_size, head size)
        self.pos = 0  # positions cached so far: a forward pass writes its T tokens from here
        self.stopped = None  # (B, T) bool while some tokens of a per-token loop have stopped

    def update(self, slot, k, v):
        if slot not in self.kv:
            shape = (*k.shape[:2], self.block_size, k.size(3))
            self.kv[slot] = (k.new_empty(shape), v.new_empty(shape))
        keys, values = self.kv[slot]
        now = slice(self.pos, self.pos + k.size(2))
        loop_slot = isinstance(slot[0], int) and slot[1] > 0  # (a loop's iteration after its first)
        if self.stopped is not None and loop_slot:  # a stopped token keeps its last run slot's
            last = self.kv[(slot[0], slot[1] - 1, *slot[2:])]  # keys and values
            k, v = (torch.where(self.stopped[:, None, :, None], old[:, :, now], new)
                    for new, old in zip((k, v), last))
        keys[:, :, now], values[:, :, now] = k, v
        return keys[:, :, :now.stop], values[:, :, :now.stop]

    def stop(self, stopped, segment, i, k):
        """Before iteration i of a per-token loop (model.Loop.per_token): the tokens that have
        stopped. If all have, iterations i..k-1 are not run, and each of their slots gets the keys
        and values of iteration i - 1's (the rule above)."""
        self.stopped = stopped if stopped.any() else None
        if stopped.all():
            now = slice(self.pos, self.pos + stopped.size(1))
            for slot in [slot for slot in self.kv if slot[:2] == (segment, i - 1)]:
                for j in range(i, k):
                    self.update((segment, j, *slot[2:]), *(t[:, :, now] for t in self.kv[slot]))

    def advance(self, T):  # a forward pass is done: its T tokens are cached
        self.pos += T
        self.stopped = None

def sampling_probs(logits, idx, temperature, top_k, top_p, repetition_penalty):
    """The next token's distribution from the last logits (B, vocab); idx: the context so far."""
    if repetition_penalty != 1.0:  # CTRL-style: make the tokens already in the context less likely
        seen = torch.gather(logits, 1, idx)
        seen = torch.where(seen > 0, seen / repetition_penalty, seen * repetition_penalty)
        logits.scatter_(1, idx, seen)
    logits = logits / max(temperature, 1e-8)
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
        logits[logits < kth] = -float('inf')
    if top_p is not None and top_p < 1.0:  # nucleus: the smallest set with probability >= top_p
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = sorted_logits.softmax(-1)
        drop = probs.cumsum(-1) - probs >= top_p
        logits[torch.zeros_like(drop).scatter(1, order, drop)] = -float('inf')
    return F.softmax(logits, dim=-1)

@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
             repetition_penalty=1.0, n_loops=None, exit=None):
    """Sample max_new_tokens tokens after idx (B, T) -> (idx, each new token's depth (B, N))."""
    block_size, cache, depths = model.config.block_size, None, []
    for _ in range(max_new_tokens):
        if cache and idx.size(1) <= block_size:
            chunk = idx[:, -1:]  # only the new token: the others' keys and values are cached
        else:  # the first step, or past block_size (learned positions: keys can't slide):
            cache = KVCache(block_size)  # (re-)encode the last block_size tokens
            chunk = idx[:, -block_size:]
        logits, _, info = model(chunk, n_loops=n_loops, exit=exit, cache=cache)
        logits = logits[:, -1, :].float()
        probs = sampling_probs(logits, idx, temperature, top_k, top_p, repetition_penalty)
        idx = torch.cat((idx, torch.multinomial(probs, num_samples=1)), dim=1)
        depths.append(info['depth'][:, -1])
    return idx, torch.stack(depths, 1)

def autocast(device, dtype='', decode=False, trained=''):
    """-> (dtype, its autocast context, which and why): the first of these that applies."""
    if dtype:
        why = f"--dtype={dtype}"
    elif trained:
        dtype, why = trained, "the dtype the model was trained with"
    elif 'cuda' in device:
        dtype, why = 'bfloat16', "the default on CUDA"
    elif decode:
        dtype, why = 'float32', "decoding on a CPU, a token at a time (bf16 autocast is slower)"
    else:  # on a CPU bf16 pays only with instructions of its own (elsewhere it is emulated)
        has = [name for name, on in [('AMX', torch.cpu._is_amx_tile_supported()),
                                     ('avx512_bf16', torch.cpu._is_avx512_bf16_supported())] if on]
        dtype = 'bfloat16' if has else 'float32'
        why = f"this CPU has {' and '.join(has) or 'no bf16'} instructions"
    ctx = torch.autocast('cuda' if 'cuda' in device else 'cpu', torch.bfloat16,
                         enabled=dtype == 'bfloat16')
    return dtype, ctx, f"{'bfloat16 autocast' if dtype == 'bfloat16' else 'float32'}: {why}"
