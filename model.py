"""
A tied-depth ("looped") GPT, each tied segment (Loop) one block run k times:
    emb + pos -> LN -> prelude -> [A x k_A][B x k_B]... -> coda -> LN -> head
Top to bottom: the config, the blocks, the tied loop (alpha, phantom, per-token depth), the rules
that stop a token (StopRule: a post-hoc Exit, ACT's gate), then GPT: forward, objective, readout,
generate. Beside it: exitgate.py (a part of the model), decode.py (the cache), GUIDE.md.
"""
import math
from dataclasses import dataclass
from typing import NamedTuple
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right
from exitgate import ExitGate

def need(ok, why):  # GPTConfig's checks: bad input to the model, said in words
    if not ok:
        raise ValueError(f"GPTConfig: {why}")

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
    supervise: tuple = ()       # global depths where the loss is also taken (multi-depth)
    act: bool = False           # per-token ACT halting gate
    halt_penalty: float = 0.01
    exit_gate: bool = False     # a learned exit distribution over the supervised depths (Ouro)
    exit_beta: float = 0.05     # its entropy bonus: keeps the distribution from collapsing
    dropout: float = 0.0
    bias: bool = False

    def __post_init__(self):  # the model's own invariants, in words (train.py checks --keys first)
        self.loops, self.supervise = tuple(self.loops), tuple(self.supervise)
        depth, sup = sum(self.loops), self.supervise
        need(self.n_head >= 1 and self.n_embd % self.n_head == 0,
             "n_embd must be a multiple of n_head (at least 1)")
        need(all(type(k) is int and k >= 1 for k in self.loops + sup),
             "loops and supervise count iterations: whole numbers, each at least 1")
        need(list(sup) == sorted(set(sup)) and all(d <= depth for d in sup),
             f"supervise lists depths once, in increasing order, up to the last ({depth})")
        need(0 < self.alpha_init < 1, "alpha_init is a sigmoid's value: between 0 and 1")
        need(self.phantom_steps >= 1, "phantom_steps must be at least 1")
        need(not (self.act and (self.phantom or sup)),
             "act picks each token's depth: it takes neither phantom nor supervise")
        need(not self.exit_gate or len(self.loops) == 1 and any(d < depth for d in sup),
             "exit_gate needs one tied segment and a supervised depth before its last")

    def exit_kinds(self):  # the post-hoc exits: none with ACT (its gate picks), none without a loop
        return [] if self.act or not self.loops else ['maxprob', 'resid']

class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head, self.dropout = c.n_head, c.dropout
        self.qkv = nn.Linear(c.n_embd, 3 * c.n_embd, bias=c.bias)
        self.proj = nn.Linear(c.n_embd, c.n_embd, bias=c.bias)

    def forward(self, x, cache=None, slot=None):
        B, T, C = x.shape
        # q, k, v: each (B, heads, T, head size), from one view of the fused projection
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
        dropout = self.dropout if self.training else 0.0
        if cache is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout)
        else:
            k, v = cache.update(slot, k, v)
            # a chunk of T new tokens after S - T cached ones is causal from the lower right: query
            # t sees keys up to S - T + t. One new token sees every key: no mask (it is faster)
            mask = causal_lower_right(T, k.size(2)) if T > 1 else None
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
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
        self.ln1 = nn.LayerNorm(c.n_embd, bias=c.bias)
        self.attn = Attention(c)
        self.ln2 = nn.LayerNorm(c.n_embd, bias=c.bias)
        self.mlp = SwiGLU(c)

    def forward(self, x, cache=None, slot=None):
        x = x + self.attn(self.ln1(x), cache, slot)
        return x + self.mlp(self.ln2(x))

@torch.no_grad()
def residual(z_new, z):
    """-> |z_k - z_(k-1)| / |z_(k-1)| per token: the study's probe, and the 'resid' exit's."""
    step = torch.linalg.vector_norm(z_new - z, dim=-1)
    return step / torch.linalg.vector_norm(z, dim=-1).clamp_min(1e-6)

class LoopReport(NamedTuple):  # what a segment's loop reports besides its output z
    depth: torch.Tensor | int    # iterations per token (B, T), or k when every token ran k
    ponder: torch.Tensor | None  # ACT: each token's ponder cost N + R (B, T); else None
    resid: torch.Tensor          # each token's relative residual at its last step (B, T)
    states: list                 # the state after each step (multi-depth supervision reads them)

class Loop(nn.Module):
    """One tied segment: the same block applied k times, z <- z + alpha * (block(z) - z)."""
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.block = Block(c)
        # alpha = sigmoid(logit): initialise the LOGIT so alpha starts at exactly alpha_init
        # (the study's bug: a logit of 0.1 gives alpha = sigmoid(0.1) = 0.525)
        self.alpha_logit = nn.Parameter(torch.tensor(math.log(c.alpha_init / (1 - c.alpha_init))))
        if c.act:  # the halting gate: zero weights, made without drawing a random number (with
            # a gate, seed s gives the same other weights), and h = sigmoid(-3) = 0.047 a step, so
            # tokens run to the maximum (starting at h = 0.5 all halt after 2: depth never pays)
            self.gate = nn.utils.skip_init(nn.Linear, c.n_embd, 1)
            nn.init.zeros_(self.gate.weight)
            nn.init.constant_(self.gate.bias, -3.0)

    def alpha(self):
        return torch.sigmoid(self.alpha_logit)

    def step(self, z, i, cache=None, segment=0):
        # a damped fixed-point step of the block's update
        return z + self.alpha() * (self.block(z, cache, (segment, i)) - z)

    def fixed(self, z, k, cache=None, segment=0):
        """Every token k steps. The phantom gradient: the first k - phantom_steps steps build
        no graph (Huginn: a no-grad loop, then one with gradients)."""
        n_free = max(k - self.c.phantom_steps, 0) if self.c.phantom and self.training else 0
        keep = self.c.supervise or not self.training  # (phantom's states would cost its memory)
        z_in, z_prev, states = z, z, []
        for i in range(k):
            with torch.set_grad_enabled(torch.is_grad_enabled() and i >= n_free):
                z_prev, z = z, self.step(z, i, cache, segment)
            if i < n_free:  # its Jacobian counts as the identity: a straight-through path from
                # the segment's input, so the prelude still gets a gradient (naive phantom: none)
                z = z_in + (z - z_in).detach()
            if keep:
                states.append(z)
        # the probe, for evaluation: training needs none
        resid = torch.zeros(z.shape[:2], device=z.device) if self.training else residual(z, z_prev)
        return z, LoopReport(k, None, resid, states)

    def per_token(self, z, k, rule, cache=None, segment=0):
        """Per-token depth: after each step a StopRule says which tokens stop; a stopped token's
        state is frozen, and the tokens after it still attend to it."""
        running = torch.ones(z.shape[:2], dtype=torch.bool, device=z.device)
        depth = torch.zeros(z.shape[:2], dtype=torch.long, device=z.device)
        resid, states = torch.zeros(z.shape[:2], device=z.device), []
        for i in range(k):
            if cache is not None:  # what a stopped token leaves in the cache: decode.KVCache
                cache.stop(~running, segment, i, k)
            # evaluating: stop once all have (in training it would break the compiled graph)
            if not self.training and not running.any():
                break
            z_new = self.step(z, i, cache, segment)
            r = residual(z_new, z)
            z = torch.where(running[..., None], z_new, z)  # stopped tokens stay frozen
            depth = depth + running.long()
            resid = torch.where(running, r, resid)
            running = running & ~rule(i, z, r, running)
            states.append(z)
        return rule.output(z), LoopReport(depth, rule.ponder, resid, states)

class StopRule:
    """What per_token asks after step i: rule(i, z, resid, running) -> (B, T) bool, True where a
    running token stops now. rule.output(z) is the segment's output, rule.ponder ACT's cost per
    token (None for the others). Two kinds: a post-hoc Exit, and ACT's learned gate."""
    ponder = None

    def output(self, z):
        return z

class Exit(StopRule):
    """A post-hoc exit on a trained model: 'maxprob' stops a token once the readout's top
    probability reaches t; 'resid' once its relative residual falls below t."""
    def __init__(self, model, exit, segment, cache=None):
        if exit[0] not in model.config.exit_kinds():
            raise ValueError(f"exit={exit}: use ('maxprob', t) or ('resid', t) on a tied loop "
                             "without an ACT gate (it picks each token's depth itself)")
        self.kind, self.t = exit
        self.model, self.segment, self.cache = model, segment, cache

    def __call__(self, i, z, resid, running):
        if self.kind == 'resid':
            return resid < self.t
        # maxprob: this readout has cache slots of its own (see decode.KVCache)
        probs = self.model.readout(z, self.cache, (self.segment, i)).float().softmax(-1)
        return probs.amax(-1) >= self.t

class ACT(StopRule):
    """Graves' adaptive computation time: after each step the gate gives each running token a
    halting probability h; it halts once their sum reaches 1 - eps (or at step k), that step
    weighed by the remainder R. Output: the weighted mean of the states."""
    def __init__(self, gate, k, z, eps=0.01):
        self.gate, self.k, self.eps = gate, k, eps
        self.cum = torch.zeros(z.shape[:2], device=z.device)  # the sum of h so far
        self.mean = torch.zeros_like(z)  # the weighted mean of the states
        self.ponder = torch.zeros(z.shape[:2], device=z.device)

    def __call__(self, i, z, resid, running):
        h = torch.sigmoid(self.gate(z).float()).squeeze(-1)
        halt = running & ((self.cum + h >= 1 - self.eps) | (i == self.k - 1))
        p = torch.where(halt, 1 - self.cum, h) * running  # the weight of this step's state
        self.mean = self.mean + p[..., None].to(z.dtype) * z
        self.ponder = self.ponder + halt * ((i + 1) + (1 - self.cum))  # N + R, when it halts
        self.cum = self.cum + p  # a halted token's sum is 1: it runs no more steps
        return halt

    def output(self, z):
        return self.mean

class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        c = self.config = config
        self.wte = nn.Embedding(c.vocab_size, c.n_embd)
        self.wpe = nn.Embedding(c.block_size, c.n_embd)
        self.ln_emb = nn.LayerNorm(c.n_embd, bias=c.bias)
        self.drop = nn.Dropout(c.dropout)
        self.prelude = nn.ModuleList(Block(c) for _ in range(c.n_prelude))
        self.segments = nn.ModuleList(Loop(c) for _ in c.loops)
        self.coda = nn.ModuleList(Block(c) for _ in range(c.n_coda))
        self.exit_gate = ExitGate(c) if c.exit_gate else None
        self.ln_f = nn.LayerNorm(c.n_embd, bias=c.bias)
        self.head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.head.weight = self.wte.weight  # weight tying
        # GPT-2 init; residual projections scaled down by the number of distinct layers
        proj_std = 0.02 / math.sqrt(2 * max(c.n_prelude + len(c.loops) + c.n_coda, 1))
        for name, p in self.named_parameters():
            if 'gate' in name:  # the gates start at zero
                continue
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, proj_std if name.endswith('proj.weight') else 0.02)
            elif name.endswith('bias'):
                nn.init.zeros_(p)

    @classmethod
    def from_checkpoint(cls, ckpt):  # a model as train.py saved it (as nanoGPT's from_pretrained)
        model = cls(GPTConfig(**ckpt['model_args']))
        model.load_state_dict(ckpt['model'])
        return model

    def num_params(self):  # -> (distinct parameters, with each tied block counted once a step)
        distinct = sum(p.numel() for p in self.parameters())
        per_block = [sum(p.numel() for p in s.block.parameters()) for s in self.segments]
        return distinct, distinct + sum((k - 1) * n for k, n in zip(self.config.loops, per_block))

    def alphas(self):
        return [s.alpha().item() for s in self.segments]

    def depths(self, n_loops=None):
        """Iterations per segment: the trained ones, or n_loops (one int for all, or a tuple)."""
        loops = self.config.loops if n_loops is None else n_loops
        loops = (loops,) * len(self.segments) if isinstance(loops, int) else tuple(loops)
        if len(loops) != len(self.segments) or not all(type(k) is int and k > 0 for k in loops) \
                or n_loops and not self.segments:
            raise ValueError(f"n_loops={n_loops!r}: the model has {len(self.segments)} segments")
        return loops

    def forward(self, idx, targets=None, n_loops=None, exit=None, cache=None):
        """embed -> prelude -> each tied segment k times (or fewer per token) -> readout.
        -> (logits, loss, info); cache: a KVCache (generate)."""
        B, T = idx.shape
        loops = self.depths(n_loops)
        start = 0 if cache is None else cache.pos  # (positions after the cached ones)
        if start + T > self.config.block_size:
            raise ValueError(f"{start + T} tokens: more than block_size {self.config.block_size}")
        pos = torch.arange(start, start + T, device=idx.device)
        z = self.drop(self.ln_emb(self.wte(idx) + self.wpe(pos)))  # token + position, LN
        for j, block in enumerate(self.prelude):
            z = block(z, cache, ('prelude', j))
        runs = []
        for s, (segment, k) in enumerate(zip(self.segments, loops)):
            if exit:  # each token stops where a rule says: a post-hoc exit,
                z, run = segment.per_token(z, k, Exit(self, exit, s, cache), cache, s)
            elif self.config.act:  # or ACT's gate
                z, run = segment.per_token(z, k, ACT(segment.gate, k, z), cache, s)
            else:  # every token k steps
                z, run = segment.fixed(z, k, cache, s)
            runs.append(run)
        logits = self.readout(z, cache)
        # per token: the iterations summed over the segments, the last iteration's probes
        zeros = torch.zeros(B, T, device=idx.device)  # (a plain transformer: no iteration)
        info = dict(depth=zeros.long() + sum(run.depth for run in runs),
                    ponder=sum(run.ponder for run in runs).mean() if self.config.act else None,
                    resid=runs[-1].resid if runs else zeros)
        if cache is not None:
            cache.advance(T)
        loss, info['losses'] = None, {}
        if targets is not None:
            loss, info['losses'] = self.objective(logits, targets, runs, sum(loops), info['ponder'])
        return logits, loss, info

    def objective(self, logits, targets, runs, depth, ponder):
        """-> (the loss, {depth: its loss}). Multi-depth supervision: the mean of the losses at
        each supervised depth and the last; with an exit gate, ExitGate.loss; ACT adds ponder."""
        states = [state for run in runs for state in run.states]
        depths = [d for d in self.config.supervise if d < len(states)]  # (and the last)
        every = [self.readout(states[d - 1]) for d in depths] + [logits]
        losses = {d: self.loss(d_logits, targets) for d, d_logits in zip(depths + [depth], every)}
        loss = sum(losses.values()) / len(losses)
        if self.exit_gate is not None and self.training:  # the exit distribution's loss
            nlls = torch.stack([self.loss(d_logits, targets, 'none') for d_logits in every])
            gated = [states[d - 1] for d in depths]
            loss = self.exit_gate.loss(gated, nlls.view(-1, *targets.shape), targets != -1)
        if self.config.act:  # ponder: the mean ponder cost per token
            loss = loss + self.config.halt_penalty * ponder
        return loss, losses

    def readout(self, z, cache=None, check=None):
        """coda + final LN + head: the logits if the loop stops at z. check: (segment, i) for
        a maxprob exit's check after that iteration (cache slots of its own)."""
        for j, block in enumerate(self.coda):
            z = block(z, cache, ('coda', j) if check is None else (*check, 'coda', j))
        return self.head(self.ln_f(z))

    def loss(self, logits, targets, reduction='mean'):
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-1,
                               reduction=reduction)

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        # parameters() yields each shared tensor once (tied head, tied blocks); decay 2-D weights
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{'params': [p for p in params if p.dim() >= 2], 'weight_decay': weight_decay},
                  {'params': [p for p in params if p.dim() < 2], 'weight_decay': 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=device_type == 'cuda')

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, n_loops=None):
        """Sample max_new_tokens tokens after idx (B, T), as nanoGPT's (decode.py: cached)."""
        for _ in range(max_new_tokens):
            idx_cond = idx[:, -self.config.block_size:]
            logits, _, _ = self(idx_cond, n_loops=n_loops)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float('Inf')
            probs = F.softmax(logits, dim=-1)
            idx = torch.cat((idx, torch.multinomial(probs, num_samples=1)), dim=1)
        return idx
