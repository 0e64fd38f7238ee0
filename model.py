"""
A tied-depth ("looped") GPT in one file. The sandwich:
    emb + pos -> LN -> n_prelude blocks -> [tied block A x k_A][B x k_B]... -> n_coda blocks -> LN -> head
Each tied segment applies ONE block k times with a learnable step size alpha:
    z <- z + alpha * (block(z) - z)
Read GPT.forward first, then Loop.forward (the tied loop, phantom gradient, exit, ACT).
"""
import math
import itertools
from dataclasses import dataclass, fields
import torch
import torch.nn as nn
import torch.nn.functional as F

@dataclass
class GPTConfig:
    block_size: int = 256
    vocab_size: int = 257
    n_embd: int = 128
    n_head: int = 4
    n_prelude: int = 2
    loops: tuple = (30,)        # iterations per tied segment; () = plain transformer
    n_coda: int = 2
    alpha_init: float = 0.1
    phantom: bool = False       # backprop only through the last phantom_steps iterations
    phantom_steps: int = 1
    supervise: tuple = ()       # global depths where the loss is also taken (multi-depth supervision)
    act: bool = False           # per-token ACT halting gate
    halt_penalty: float = 0.01
    dropout: float = 0.0
    bias: bool = False

    def __post_init__(self):  # bad configs fail here with one line saying what to change
        self.loops, self.supervise = tuple(self.loops), tuple(self.supervise)
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}: pick n_head dividing n_embd")
        if any(k <= 0 for k in self.loops):
            raise ValueError(f"loops={self.loops} has an entry <= 0: every tied segment needs at least 1 iteration")
        if any(d <= 0 or d > sum(self.loops) for d in self.supervise):
            raise ValueError(f"supervise={self.supervise} needs depths in 1..{sum(self.loops)} (the total of loops={self.loops})")
        if self.act and self.phantom:
            raise ValueError("act=True needs gradient through every halting probability: set phantom=False")
        if self.act and self.supervise:
            raise ValueError("act=True and supervise both choose the depth: use one of them (supervise=())")
        if self.phantom and self.phantom_steps < 1:
            raise ValueError(f"phantom_steps={self.phantom_steps} must be >= 1")

class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head, self.dropout, self.block_size = c.n_head, c.dropout, c.block_size
        self.qkv = nn.Linear(c.n_embd, 3 * c.n_embd, bias=c.bias)
        self.proj = nn.Linear(c.n_embd, c.n_embd, bias=c.bias)

    def forward(self, x, kv=None):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)  # 3 x (B, nh, T, hs)
        if kv is not None:  # generation: kv = [keys, values, n filled] of this block application (see kv_slots)
            if not kv:  # preallocated for block_size positions (gpt-fast's static cache): no torch.cat per token
                kv[:] = [k.new_empty(B, self.n_head, self.block_size, C // self.n_head) for _ in 'kv'] + [0]
            n = kv[2]
            kv[0][:, :, n:n + T], kv[1][:, :, n:n + T], kv[2] = k, v, n + T
            k, v = kv[0][:, :, :n + T], kv[1][:, :, :n + T]
        S = k.size(2)  # with cached keys the causal mask must be aligned bottom-right: query t sees keys <= S - T + t
        mask = None if S == T or T == 1 else torch.ones(T, S, dtype=torch.bool, device=x.device).tril(S - T)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=S == T > 1,
                                           dropout_p=self.dropout if self.training else 0)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))

class SwiGLU(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.w1 = nn.Linear(c.n_embd, 4 * c.n_embd, bias=c.bias)
        self.w3 = nn.Linear(c.n_embd, 4 * c.n_embd, bias=c.bias)
        self.proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=c.bias)
        self.drop = nn.Dropout(c.dropout)

    def forward(self, x):
        return self.drop(self.proj(F.silu(self.w1(x)) * self.w3(x)))

class Block(nn.Module):
    """Pre-norm causal attention + SwiGLU MLP, each with a residual."""
    def __init__(self, c):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(c.n_embd, bias=c.bias), Attention(c)
        self.ln2, self.mlp = nn.LayerNorm(c.n_embd, bias=c.bias), SwiGLU(c)

    def forward(self, x, kv=None):
        x = x + self.attn(self.ln1(x), kv)
        return x + self.mlp(self.ln2(x))

class Loop(nn.Module):
    """One tied segment: the same block applied k times, z <- z + alpha * (block(z) - z)."""
    def __init__(self, c):
        super().__init__()
        self.c, self.block = c, Block(c)
        # alpha = sigmoid(logit): init the LOGIT so alpha starts at exactly alpha_init (sigmoid(0.1) would be 0.525)
        self.alpha_logit = nn.Parameter(torch.tensor(math.log(c.alpha_init / (1 - c.alpha_init))))
        if c.act:
            # halting gate; weight 0 and bias -3 give h = sigmoid(-3) = 0.047 per step for every token, so the
            # cumulative halting probability stays far below 1 - eps within a few loops: tokens start out
            # continuing to the maximum, and the gate learns where to stop (a gate that starts at h=0.5
            # halts everything after 2 steps and never sees what depth buys).
            self.gate = nn.Linear(c.n_embd, 1)
            nn.init.zeros_(self.gate.weight)
            nn.init.constant_(self.gate.bias, -3.0)

    def alpha(self):
        return torch.sigmoid(self.alpha_logit)

    def forward(self, z, k, slots=None, exit=None, readout=None, on_step=None, eps=0.01):
        """Returns (z, depth (B,T), ponder (B,T) or None, resid (B,T)). Tokens that halted (ACT) or
        exited (post-hoc `exit`) keep their state frozen; the others still attend to it."""
        B, T, _ = z.shape
        alpha, grad_on, z_in = self.alpha(), torch.is_grad_enabled(), z
        n_grad = min(k, self.c.phantom_steps) if self.c.phantom and self.training else k
        adaptive = self.c.act or exit is not None  # only then can tokens stop early
        running = torch.ones(B, T, dtype=torch.bool, device=z.device)
        depth = torch.full((B, T), 0 if adaptive else k, dtype=torch.long, device=z.device)
        resid = torch.zeros(B, T, device=z.device)
        used = []  # the cache slots of the last computed iteration (block, then readout blocks)
        rec = record(slots, used) if slots else None
        if self.c.act:
            cum = torch.zeros(B, T, device=z.device)      # sum of h over the steps taken so far
            out = torch.zeros_like(z)                     # halting-weighted mean of the states
            ponder = torch.zeros(B, T, device=z.device)   # N + R per token
        for i in range(k):
            if adaptive and not running.any():  # every token has stopped (.any() syncs a GPU: only when needed)
                if slots is None:
                    break
                skip(slots, used, T)  # generation: skip the work, but fill this iteration's cache slots
                continue
            used.clear()
            # phantom gradient: the first k - n_grad steps run without a graph ...
            with torch.set_grad_enabled(grad_on and i >= k - n_grad):
                z_new = torch.lerp(z, self.block(z, next(rec) if rec else None), alpha)  # z + alpha * (block(z) - z)
            if grad_on and not z_new.requires_grad:
                # ... and their Jacobian is taken as the identity: a straight-through path from the segment's
                # input, so the prelude and embeddings still get gradient (naive phantom gives them none)
                z_new = z_in + (z_new - z_in).detach()
            # the relative residual |z_k - z_{k-1}| / |z_{k-1}| is a probe: a resid exit stops on it and eval reports
            # each token's last one (every step when tokens stop at different steps); training never needs it
            if exit is not None or (not grad_on and (adaptive or i == k - 1)):
                with torch.no_grad():
                    r = (z_new - z).norm(dim=-1) / z.norm(dim=-1).clamp_min(1e-6)
                resid = torch.where(running, r, resid)
            if adaptive:
                depth = depth + running.long()
                z = torch.where(running[..., None], z_new, z)  # stopped tokens stay frozen
            else:
                z = z_new
            if self.c.act:  # Graves' ACT, per token
                h = torch.sigmoid(self.gate(z).float()).squeeze(-1)
                halt = running & ((cum + h >= 1 - eps) | (i == k - 1))
                p = torch.where(halt, 1 - cum, torch.where(running, h, torch.zeros_like(h)))  # R at the halting step
                out = out + p[..., None].to(z.dtype) * z
                ponder = ponder + torch.where(halt, (i + 1) + (1 - cum), torch.zeros_like(h))
                cum = cum + torch.where(running & ~halt, h, torch.zeros_like(h))
                running = running & ~halt
            elif exit is not None:  # post-hoc per-token exit
                kind, t = exit
                stop = readout(z, rec).float().softmax(-1).amax(-1) >= t if kind == 'maxprob' else r < t
                running = running & ~stop
            if on_step is not None:
                on_step(i + 1, z)
        return (out if self.c.act else z), depth, (ponder if self.c.act else None), resid

def record(slots, used):
    """Hand out cache slots, noting which ones this iteration used."""
    for s in slots:
        used.append(s)
        yield s

def skip(slots, used, T):
    """The KV-cache rule for a skipped iteration: a chunk of T tokens that has stopped (exit or ACT) computes
    nothing more, and a later token attending at this iteration sees the stopped tokens' latest computed keys
    and values of the same block, i.e. those of the last iteration they ran."""
    for prev in used:
        s, n = next(slots), prev[2] - T
        s[:] = s or [torch.empty_like(prev[0]), torch.empty_like(prev[1]), n]  # (empty on the cache's first pass)
        s[0][:, :, n:n + T], s[1][:, :, n:n + T], s[2] = prev[0][:, :, n:n + T], prev[1][:, :, n:n + T], n + T

class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        c = self.config = config
        self.wte, self.wpe = nn.Embedding(c.vocab_size, c.n_embd), nn.Embedding(c.block_size, c.n_embd)
        self.ln_emb, self.drop = nn.LayerNorm(c.n_embd, bias=c.bias), nn.Dropout(c.dropout)
        self.prelude = nn.ModuleList(Block(c) for _ in range(c.n_prelude))
        self.segments = nn.ModuleList(Loop(c) for _ in c.loops)
        self.coda = nn.ModuleList(Block(c) for _ in range(c.n_coda))
        self.ln_f = nn.LayerNorm(c.n_embd, bias=c.bias)
        self.head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.head.weight = self.wte.weight  # weight tying
        n_layers = c.n_prelude + len(c.loops) + c.n_coda
        for name, p in self.named_parameters():
            if p.dim() >= 2 and 'gate' not in name:  # GPT-2 init, residual projections scaled by depth
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * max(n_layers, 1)) if name.endswith('proj.weight') else 0.02)
            elif name.endswith('bias') and 'gate' not in name:
                nn.init.zeros_(p)

    def num_params(self):
        distinct = sum(p.numel() for p in self.parameters())
        per_block = [sum(p.numel() for p in s.block.parameters()) for s in self.segments]
        return distinct, distinct + sum((k - 1) * n for k, n in zip(self.config.loops, per_block))

    def alphas(self):
        return [s.alpha().item() for s in self.segments]

    def depths(self, n_loops=None):
        """Iterations per segment: the trained ones, or n_loops (int for every segment, or a tuple)."""
        if n_loops is None:
            return self.config.loops
        loops = (n_loops,) * len(self.segments) if isinstance(n_loops, int) else tuple(n_loops)
        if len(loops) != len(self.segments) or any(k <= 0 for k in loops):
            raise ValueError(f"n_loops={n_loops} must be a positive int or a tuple of {len(self.segments)} positive ints")
        return loops

    def readout(self, z, slots=None):
        """coda + final LN + head: the logits a state z would give if the loop stopped here."""
        for block in self.coda:
            z = block(z, next(slots) if slots else None)
        return self.head(self.ln_f(z))

    def forward(self, idx, targets=None, n_loops=None, exit=None, cache=None):
        B, T = idx.shape
        loops = self.depths(n_loops)
        # with a KV cache each block application (in call order) owns one slot of keys/values
        slots = None if cache is None else kv_slots(cache)
        start = cache[0][2] if cache else 0
        if start + T > self.config.block_size:
            raise ValueError(f"sequence of {start + T} tokens is longer than the model's block_size {self.config.block_size}")
        if exit is not None and (self.config.act or exit[0] not in ('maxprob', 'resid')):
            raise ValueError(f"exit={exit}: use ('maxprob', t) or ('resid', t), on a model without the ACT gate")
        ce = lambda logits: F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-1)
        pos = torch.arange(start, start + T, device=idx.device)
        z = self.drop(self.ln_emb(self.wte(idx) + self.wpe(pos)))
        for block in self.prelude:
            z = block(z, next(slots) if slots else None)
        losses, total, done = {}, sum(loops), 0
        depth = torch.zeros(B, T, dtype=torch.long, device=idx.device)
        ponder, resid = None, torch.zeros(B, T, device=idx.device)
        for seg, k in zip(self.segments, loops):
            def supervised(i, state, done=done):  # multi-depth supervision: loss of the readout at this depth
                if targets is not None and done + i in self.config.supervise and done + i != total:
                    losses[done + i] = ce(self.readout(state))
            z, d, p, resid = seg(z, k, slots, exit, self.readout, supervised)
            depth, done = depth + d, done + k
            ponder = p if ponder is None else ponder + p
        logits = self.readout(z, slots)
        loss = None
        if targets is not None:
            losses[total] = ce(logits)
            loss = sum(losses.values()) / len(losses)  # the mean over supervised depths (and the last)
            if ponder is not None:
                loss = loss + self.config.halt_penalty * ponder.mean()
        info = dict(depth=depth, losses=losses, resid=resid, ponder=None if ponder is None else ponder.mean())
        return logits, loss, info

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        # parameters() yields each shared tensor once (tied head, tied loop blocks); decay only 2-D weights
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{'params': [p for p in params if p.dim() >= 2], 'weight_decay': weight_decay},
                  {'params': [p for p in params if p.dim() < 2], 'weight_decay': 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=device_type == 'cuda')

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
                 repetition_penalty=1.0, n_loops=None, exit=None, kv_cache=True, return_depth=False):
        """Sample max_new_tokens tokens after idx (B, T). With return_depth, also the loop depth spent predicting each new token.
        kv_cache: encode the prompt once, then run each new token alone against cached keys/values (one slot per block
        application: each prelude block, each (segment, iteration) of a tied block, each readout of the exit check,
        the coda). With an exit policy or the ACT gate, a new token that stops early skips its remaining iterations,
        and later tokens read its last computed keys/values there (skip()); re-encoding (kv_cache=False) instead
        re-projects its frozen state at every iteration, so the two may sample differently with exits, never at a
        fixed depth. A chunk skips only when all its rows have stopped (a batch runs until its last row stops).
        Past block_size, each step re-encodes the last block_size tokens: positions are learned, so keys can't slide."""
        cache, new_depths = None, []
        for _ in range(max_new_tokens):
            if kv_cache and cache is not None and idx.size(1) <= self.config.block_size:
                logits, _, info = self(idx[:, -1:], n_loops=n_loops, exit=exit, cache=cache)
            else:  # first step, or the context outgrew block_size: (re)fill the cache from the cropped context
                cache = [] if kv_cache else None
                logits, _, info = self(idx[:, -self.config.block_size:], n_loops=n_loops, exit=exit, cache=cache)
            logits = logits[:, -1, :].float()
            if repetition_penalty != 1.0:  # CTRL-style: make tokens already in the context less likely
                seen = torch.gather(logits, 1, idx)
                logits.scatter_(1, idx, torch.where(seen > 0, seen / repetition_penalty, seen * repetition_penalty))
            logits = logits / max(temperature, 1e-8)
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float('inf')
            if top_p is not None and top_p < 1.0:  # nucleus: keep the smallest set with probability >= top_p
                sorted_logits, order = torch.sort(logits, descending=True)
                probs = sorted_logits.softmax(-1)
                drop = probs.cumsum(-1) - probs >= top_p
                logits[torch.zeros_like(drop).scatter(1, order, drop)] = -float('inf')
            idx = torch.cat((idx, torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)), dim=1)
            new_depths.append(info['depth'][:, -1])
        return (idx, torch.stack(new_depths, 1)) if return_depth else idx

def kv_slots(cache):
    """Yield one [keys, values, n filled] list per block application, in call order, growing the cache on the first pass."""
    for i in itertools.count():
        if i == len(cache):
            cache.append([])
        yield cache[i]

def load_checkpoint(path, device='cpu'):
    """-> (model, checkpoint dict). weights_only=True: a checkpoint can hold tensors and plain data, never code."""
    try:
        ckpt = torch.load(path, map_location=device, weights_only=True)
        config = GPTConfig(**ckpt['model_args'])
        model = GPT(config)
        model.load_state_dict(ckpt['model'])
    except FileNotFoundError:
        raise FileNotFoundError(f"no checkpoint at {path}: train one first (python train.py ...) or set --out_dir")
    except ValueError as e:  # a config the checkpoint should never have held
        raise ValueError(f"{path}: {e}") from None
    except Exception as e:  # weights_only refuses anything but tensors and plain data: unpickling it could run code
        why = ("is not a safe checkpoint: it holds objects other than tensors and plain data (refused)"
               if 'Weights only' in str(e) else "is truncated or not a nanoloop checkpoint")
        raise ValueError(f"{path} {why}") from None
    return model.to(device), ckpt

def parse_exit(s):
    """'maxprob:0.9' -> ('maxprob', 0.9), the exit= of forward and generate; a bad string -> one-line error."""
    kind, _, t = s.partition(':')
    try:
        if kind in ('maxprob', 'resid'):
            return kind, float(t)
    except ValueError:
        pass
    raise ValueError(f"exit_at={s!r}: write 'maxprob:THRESHOLD' or 'resid:THRESHOLD', e.g. 'maxprob:0.9'")

def model_args(config):
    return {f.name: getattr(config, f.name) for f in fields(config)}
