"""Tests for model.py: the tied loop, phantom gradient, multi-depth supervision, post-hoc exit, ACT,
config validation, generation and checkpoint loading. Tiny float32 models on CPU; the file runs in seconds."""
import math
import warnings
import weakref

import pytest
import torch
import torch.nn.functional as F

from dataclasses import asdict
from dataclasses import asdict as model_args
from model import ACT, Exit, GPT, GPTConfig, ExitGate, LoopReport, residual
from decode import KVCache, autocast, generate as cached_generate
from guards import load_checkpoint

V = 50  # vocab size of every test model


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run fastest on one thread, and do not slow to a crawl when other processes share the cores."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def cfg(**kw):
    base = dict(block_size=16, vocab_size=V, n_embd=16, n_head=2, n_prelude=1, loops=(3,), n_coda=1, dropout=0.0)
    base.update(kw)
    return GPTConfig(**base)


def make(seed=0, **kw):
    torch.manual_seed(seed)
    return GPT(cfg(**kw))


def batch(B=2, T=8, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, V, (B, T + 1), generator=g)
    return x[:, :-1], x[:, 1:]


def embed(m, idx):
    """The state entering the first tied segment: emb + pos -> LN -> prelude."""
    z = m.ln_emb(m.wte(idx) + m.wpe(torch.arange(idx.size(1))))
    for b in m.prelude:
        z = b(z)
    return z


def step(seg, z):
    return z + seg.alpha() * (seg.block(z) - z)


def ce(logits, tgt):
    return F.cross_entropy(logits.flatten(0, 1), tgt.flatten())


def grads(m):
    return {n: (None if p.grad is None else p.grad.clone()) for n, p in m.named_parameters()}


def run_loop(m, idx, seg_i=0, k=None, exit=None):
    """Call segment seg_i directly (input = prelude output, or previous segments run in full) and record the
    state after every step (a LoopReport's states, with ACT or an exit). -> (out, depth, ponder, resid, states[k+1]),
    states[0] the input."""
    z = embed(m, idx)
    for s, kk in zip(m.segments[:seg_i], m.config.loops):
        z = s(z, kk)[0]
    seg = m.segments[seg_i]
    k = k or m.config.loops[seg_i]
    states = [z.clone()]
    if not m.config.act and exit is None:
        zs = [z]
        for i in range(k):
            zs.append(seg.step(zs[-1], i))
        states += [s.detach().clone() for s in zs[1:]]
        out, run = seg.fixed(z, k)
        assert torch.allclose(out, zs[-1], atol=1e-6)
        resid = residual(states[-1], states[-2])
        return states[-1], torch.full(z.shape[:2], k), None, resid, states
    rule = ACT(seg.gate, k, z) if m.config.act else Exit(m, exit, seg_i)  # (as GPT.forward picks)
    out, run = seg.per_token(z, k, rule)
    states += [s.detach().clone() for s in run.states]
    return out, run.depth, run.ponder, run.resid, states


def peaky(seed=0, wte=40.0, wpe=1.0, **kw):
    """An untrained model whose readout is confident for some tokens and not others (larger output weights;
    larger position embeddings make greedy generation vary instead of repeating the last token)."""
    m = make(seed, **kw)
    with torch.no_grad():
        m.wte.weight.mul_(wte)
        m.wpe.weight.mul_(wpe)
    return m


def gen_model(**kw):
    """For generation: varied greedy continuations, and coda attention strong enough that a readout's exit decision
    depends on the earlier positions (so a KV cache that gave the exit check the wrong context would show)."""
    m = peaky(wte=20.0, wpe=40.0, alpha_init=0.5, n_coda=2, **kw)
    with torch.no_grad():
        for b in m.coda:
            b.attn.proj.weight.mul_(30)
            b.attn.qkv.weight.mul_(10)
    return m


# ---------------------------------------------------------------- 1. alpha init

@pytest.mark.parametrize("alpha_init", [0.1, 0.3])
def test_alpha_starts_at_alpha_init_in_every_segment(alpha_init):
    m = make(loops=(2, 3, 1), alpha_init=alpha_init)
    alphas = m.alphas()
    assert len(alphas) == 3
    for a, seg in zip(alphas, m.segments):
        assert abs(a - alpha_init) < 1e-6, alphas
        assert abs(seg.alpha().item() - alpha_init) < 1e-6
    assert abs(alphas[0] - torch.sigmoid(torch.tensor(alpha_init)).item()) > 0.1  # not the sigmoid(alpha_init) bug


# ---------------------------------------------------------------- 2./3. loop counts and n_loops

def count_block_calls(m):
    counts = [0] * len(m.segments)
    for i, seg in enumerate(m.segments):
        seg.block.register_forward_hook(lambda mod, inp, out, i=i: counts.__setitem__(i, counts[i] + 1))
    return counts


@pytest.mark.parametrize("n_loops,expected", [(None, (2, 3)), (4, (4, 4)), ((1, 5), (1, 5)), ([3, 1], (3, 1))])
def test_tied_block_runs_exactly_loops_times(n_loops, expected):
    m = make(loops=(2, 3))
    counts = count_block_calls(m)
    idx, tgt = batch()
    with torch.no_grad():
        _, loss, info = m(idx, tgt, n_loops=n_loops)
    assert tuple(counts) == expected
    assert info['depth'].shape == idx.shape and info['depth'].dtype == torch.long
    assert (info['depth'] == sum(expected)).all()
    assert info['ponder'] is None
    assert set(info['losses']) == {sum(expected)}


@pytest.mark.parametrize("bad", [(1, 2, 3), (2,), 0, (2, 0), -1])
def test_n_loops_bad_values_raise(bad):
    m = make(loops=(2, 3))
    with pytest.raises(ValueError, match="n_loops"):
        m(batch()[0], n_loops=bad)


def test_logits_change_with_depth():
    m = make(loops=(2,))
    idx, _ = batch()
    with torch.no_grad():
        l1 = m(idx, n_loops=1)[0]
        l4 = m(idx, n_loops=4)[0]
        l4b = m(idx, n_loops=4)[0]
    assert l1.shape == l4.shape == (2, 8, V)
    assert torch.equal(l4, l4b)  # deterministic
    assert (l1 - l4).abs().max() > 1e-4


# ---------------------------------------------------------------- 4. weights: per segment, tied within a segment

def test_segments_have_their_own_weights():
    m = make(loops=(2, 2))
    a, b = m.segments
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    assert pa.keys() == pb.keys()
    for n in pa:
        assert pa[n] is not pb[n]
        assert pa[n].data_ptr() != pb[n].data_ptr()
        if pa[n].dim() >= 2:
            assert not torch.equal(pa[n], pb[n]), n  # independently initialised
    with torch.no_grad():  # changing one segment's block leaves the other's untouched
        a.block.attn.qkv.weight.add_(1.0)
    assert not torch.equal(a.block.attn.qkv.weight, b.block.attn.qkv.weight)


def test_tied_block_parameters_count_once():
    def numel(mod):
        return sum(p.numel() for p in mod.parameters())
    m2, m7 = make(loops=(2,)), make(loops=(7,))
    distinct = sum(p.numel() for p in m2.parameters())
    assert distinct == sum(p.numel() for p in m7.parameters())  # depth adds no parameters
    block = numel(m2.segments[0].block)
    expected = (numel(m2.wte) + numel(m2.wpe) + numel(m2.ln_emb) + numel(m2.prelude) + block + 1  # + alpha_logit
                + numel(m2.coda) + numel(m2.ln_f))  # head is tied to wte
    assert distinct == expected
    assert m2.head.weight is m2.wte.weight
    ids = [id(p) for p in m7.parameters()]
    assert len(ids) == len(set(ids))
    assert m7.num_params() == (distinct, distinct + 6 * block)


def test_plain_transformer_with_no_loops():
    m = make(loops=())
    m.train()
    assert m.alphas() == [] and len(m.segments) == 0
    idx, tgt = batch()
    logits, loss, info = m(idx, tgt)
    assert logits.shape == (2, 8, V) and torch.isfinite(loss)
    assert (info['depth'] == 0).all() and set(info['losses']) == {0}
    loss.backward()
    for n, p in m.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, n


# ---------------------------------------------------------------- 5./7. phantom gradient

def ref_phantom_loss(m, idx, tgt, n_grad, straight_through):
    """Hand-built phantom gradient for a one-segment model: k - n_grad steps under no_grad, then n_grad steps with a
    graph. straight_through=False detaches the state (naive phantom); True keeps the identity path to the input."""
    seg, k = m.segments[0], m.config.loops[0]
    z_in = embed(m, idx)
    z = z_in
    with torch.no_grad():
        for _ in range(k - n_grad):
            z = step(seg, z)
    z = z_in + (z - z_in).detach() if straight_through else z.detach()
    for _ in range(n_grad):
        z = step(seg, z)
    for b in m.coda:
        z = b(z)
    return ce(m.head(m.ln_f(z)), tgt)


def phantom_pair(k, steps):
    m = make(loops=(k,), phantom=True, phantom_steps=steps)
    m.train()
    ref = make(loops=(k,))
    ref.load_state_dict(m.state_dict())
    ref.train()
    return m, ref


def test_phantom_every_parameter_gets_gradient():
    m = make(loops=(4,), phantom=True, n_prelude=2)
    m.train()
    idx, tgt = batch()
    m(idx, tgt)[1].backward()
    for n, p in m.named_parameters():
        assert p.grad is not None, n
    for mod in [m.wte, m.wpe, m.ln_emb, m.prelude, m.segments[0].block, m.coda]:
        for n, p in mod.named_parameters():
            assert p.grad.abs().sum() > 0, n
    assert m.segments[0].alpha_logit.grad.abs() > 0


@pytest.mark.parametrize("k", [1, 4])
def test_phantom_one_step_matches_hand_reference(k):
    m, ref = phantom_pair(k, 1)
    idx, tgt = batch()
    loss = m(idx, tgt)[1]
    loss.backward()
    g = grads(m)
    # naive reference (state detached before the last step): the loop's parameters get the same gradient
    ref_loss = ref_phantom_loss(ref, idx, tgt, 1, straight_through=False)
    assert torch.allclose(loss, ref_loss, atol=1e-6)
    ref_loss.backward()
    gr = grads(ref)
    loop_names = [n for n in g if n.startswith('segments.0.')]
    assert len(loop_names) > 5 and 'segments.0.alpha_logit' in loop_names
    for n in loop_names + [n for n in g if n.startswith(('coda.', 'ln_f.'))]:
        assert gr[n] is not None and torch.allclose(g[n], gr[n], atol=1e-7, rtol=1e-4), n
    # ... but the naive reference gives the prelude nothing, the model's straight-through path gives it gradient
    for n in g:
        if n.startswith('prelude.') and n.endswith('weight') and 'ln' not in n:
            assert gr[n] is None and g[n].abs().sum() > 0, n
    # the straight-through reference matches every gradient, prelude and embeddings included
    ref.zero_grad(set_to_none=True)
    ref_phantom_loss(ref, idx, tgt, 1, straight_through=True).backward()
    gs = grads(ref)
    for n in g:
        assert torch.allclose(g[n], gs[n], atol=1e-7, rtol=1e-4), n


def test_phantom_two_steps_matches_reference():
    m, ref = phantom_pair(5, 2)
    idx, tgt = batch()
    m(idx, tgt)[1].backward()
    ref_phantom_loss(ref, idx, tgt, 2, straight_through=True).backward()
    g, gr = grads(m), grads(ref)
    for n in g:
        assert torch.allclose(g[n], gr[n], atol=1e-7, rtol=1e-4), n


@pytest.mark.parametrize("steps", [4, 9])
def test_phantom_steps_k_equals_full_backprop(steps):
    m, ref = phantom_pair(4, steps)
    idx, tgt = batch()
    m(idx, tgt)[1].backward()
    ref(idx, tgt)[1].backward()
    g, gr = grads(m), grads(ref)
    for n in g:
        assert torch.allclose(g[n], gr[n], atol=1e-7, rtol=1e-5), n
    # and phantom_steps=1 really is a different gradient for the loop block
    m1, _ = phantom_pair(4, 1)
    m1(idx, tgt)[1].backward()
    w = 'segments.0.block.mlp.w1.weight'
    assert not torch.allclose(grads(m1)[w], gr[w], atol=1e-6)


# ---------------------------------------------------------------- 6. memory saved for backward

def saved_bytes(phantom, k):
    """Bytes of tensors saved for backward that are still held when backward starts (graphs of intermediate
    computations that were freed during forward are not counted)."""
    m = make(loops=(k,), phantom=phantom, n_embd=32)
    m.train()
    idx, tgt = batch(2, 16)
    live = [0]

    class Held:
        __slots__ = ('t', '__weakref__')

    def pack(t):
        h = Held()
        h.t = t.detach()  # detached: holding an op's own output must not keep its graph alive (a reference cycle)
        n = t.numel() * t.element_size()
        live[0] += n
        weakref.finalize(h, lambda: live.__setitem__(0, live[0] - n))  # freed with the graph node that saved it
        return h

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda h: h.t):
        loss = m(idx, tgt)[1]
    held = live[0]
    loss.backward()  # the hooks must round-trip correctly
    assert m.segments[0].block.mlp.w1.weight.grad is not None
    return held


def test_phantom_memory_constant_full_backprop_linear():
    full = {k: saved_bytes(False, k) for k in (2, 4, 8)}
    ph = {k: saved_bytes(True, k) for k in (2, 8)}
    per_loop = (full[4] - full[2]) / 2
    assert per_loop > 0.1 * full[2]  # each full-backprop iteration keeps a sizeable graph
    assert abs((full[8] - full[4]) - 2 * (full[4] - full[2])) <= 0.1 * (full[8] - full[4])  # linear in k
    assert abs(ph[8] - ph[2]) < 0.02 * per_loop  # phantom: constant in k
    assert ph[8] < full[2]


# ---------------------------------------------------------------- 8. multi-depth supervision

def test_multi_depth_supervision_one_segment():
    m = peaky(loops=(4,), supervise=(1, 2, 4), alpha_init=0.5)
    idx, tgt = batch()
    _, loss, info = m(idx, tgt)
    assert set(info['losses']) == {1, 2, 4}
    assert torch.allclose(loss, sum(info['losses'].values()) / 3)
    with torch.no_grad():
        seg = m.segments[0]
        z1 = step(seg, embed(m, idx))
        z2 = step(seg, z1)
        assert torch.allclose(info['losses'][1], ce(m.readout(z1), tgt), atol=1e-6)
        assert torch.allclose(info['losses'][2], ce(m.readout(z2), tgt), atol=1e-6)
        assert torch.allclose(info['losses'][4], ce(m(idx)[0], tgt), atol=1e-6)
    assert abs(info['losses'][1].item() - info['losses'][4].item()) > 1e-3
    # without targets no loss is taken; without supervise only the last depth
    assert m(idx)[1] is None and m(idx)[2]['losses'] == {}
    plain = make(loops=(4,))
    assert set(plain(idx, tgt)[2]['losses']) == {4}


def test_multi_depth_supervision_across_segments():
    """Depths 1 and 3 of (2, 2), counted across the segments, and the last: the loss is their losses' mean. The tied
    blocks' weights x10 make the depths' losses far apart, so that a wrong depth or a wrong mean shows."""
    m = peaky(loops=(2, 2), supervise=(1, 3), alpha_init=0.5)
    with torch.no_grad():
        for seg in m.segments:
            for p in seg.block.parameters():
                p.mul_(10 if p.dim() >= 2 else 1)
    idx, tgt = batch()
    _, loss, info = m(idx, tgt)
    assert set(info['losses']) == {1, 3, 4}
    with torch.no_grad():
        a, b = m.segments
        z1 = step(a, embed(m, idx))
        z3 = step(b, step(a, z1))
        by_hand = {d: ce(m.readout(z), tgt).item() for d, z in ((1, z1), (3, z3), (4, step(b, z3)))}
    assert min(abs(x - y) for x in by_hand.values() for y in by_hand.values() if x != y) > 0.03, by_hand
    for d, want in by_hand.items():
        assert info['losses'][d].item() == pytest.approx(want, abs=1e-5), (d, info['losses'][d], want)
    assert loss.item() == pytest.approx(sum(by_hand.values()) / 3, abs=1e-5), (loss, by_hand)
    loss.backward()
    assert m.segments[1].block.mlp.w1.weight.grad.abs().sum() > 0


# ---------------------------------------------------------------- 9. post-hoc exit

def test_exit_maxprob_freezes_tokens_and_matches_criterion():
    m = peaky(loops=(5,))
    m.eval()
    idx, _ = batch(4, 12)
    with torch.no_grad():
        maxprob = [m.readout(s).softmax(-1).amax(-1) for s in run_loop(m, idx)[4][1:]]
        t = maxprob[0].median().item()  # about half the tokens exit at step 1
        out, depth, _, _, states = run_loop(m, idx, exit=('maxprob', t))
        _, _, info = m(idx, exit=('maxprob', t))
    assert torch.equal(info['depth'], depth)
    assert depth.min() >= 1 and depth.max() <= 5
    assert len(depth.unique()) >= 2, "test needs a mix of depths"
    assert (depth == 1).float().mean() > 0.2
    k = len(states) - 1
    for b in range(idx.size(0)):
        for i in range(idx.size(1)):
            d = depth[b, i].item()
            probs = [m.readout(s).softmax(-1).amax(-1)[b, i].item() for s in states[1:d + 1]]
            assert all(p < t for p in probs[:-1])  # did not exit earlier
            assert d == k or probs[-1] >= t       # exited when the criterion first held
            for s in states[d + 1:]:              # frozen afterwards
                assert torch.equal(s[b, i], states[d][b, i])
    assert torch.equal(out, states[-1])


def resid_model(k):
    """-> (model, threshold): larger updates, so the residual changes from step to step, and a resid exit
    threshold (the median residual at step 3) that stops some tokens early and not others."""
    m = make(loops=(k,), alpha_init=0.5)
    with torch.no_grad():
        m.segments[0].block.attn.proj.weight.mul_(30)
        m.segments[0].block.mlp.proj.weight.mul_(30)
        free = run_loop(m, batch(4, 12)[0])[4]
    r = [((b - a).norm(dim=-1) / a.norm(dim=-1)) for a, b in zip(free[:-1], free[1:])]
    return m.eval(), r[2].median().item()


def test_exit_resid_freezes_tokens():
    m, t = resid_model(6)
    idx, _ = batch(4, 12)
    with torch.no_grad():
        out, depth, _, resid, states = run_loop(m, idx, exit=('resid', t))
        assert torch.equal(m(idx, exit=('resid', t))[2]['depth'], depth)
    assert depth.min() >= 1 and depth.max() <= 6 and len(depth.unique()) >= 2
    for b in range(idx.size(0)):
        for i in range(idx.size(1)):
            d = depth[b, i].item()
            rs = [((states[j][b, i] - states[j - 1][b, i]).norm() / states[j - 1][b, i].norm()).item()
                  for j in range(1, d + 1)]
            assert all(x >= t * (1 - 1e-5) for x in rs[:-1])
            assert d == 6 or rs[-1] < t * (1 + 1e-5)
            assert abs(resid[b, i].item() - rs[-1]) < 1e-4 * rs[-1]  # resid: the token's own last iteration
            for s in states[d + 1:]:
                assert torch.equal(s[b, i], states[d][b, i])


@pytest.mark.parametrize("loops", [(4,), (2, 3)])
@pytest.mark.parametrize("exit,expect", [(('maxprob', 1.01), 'max'), (('resid', -1.0), 'max'),
                                         (('maxprob', 0.0), 'one'), (('resid', 1e9), 'one')])
def test_exit_extreme_thresholds(loops, exit, expect):
    m = make(loops=loops)
    idx, _ = batch()
    with torch.no_grad():
        depth = m(idx, exit=exit)[2]['depth']
    # exit is decided per segment: an always-true criterion gives one iteration in EACH segment
    assert (depth == (sum(loops) if expect == 'max' else len(loops))).all()


def test_exit_rejects_bad_kind_and_act_models():
    idx, _ = batch()
    with pytest.raises(ValueError, match="exit"):
        make()(idx, exit=('entropy', 0.5))
    with pytest.raises(ValueError, match="exit"):
        make(act=True)(idx, exit=('maxprob', 0.5))


def test_resid_info_is_last_iteration_relative_residual():
    m = make(loops=(3,))
    assert (m(batch()[0])[2]['resid'] == 0).all()  # training: no probes
    m.eval()  # evaluating: the probes
    idx, _ = batch()
    with torch.no_grad():
        states = run_loop(m, idx)[4]
        info = m(idx)[2]
    expect = (states[3] - states[2]).norm(dim=-1) / states[2].norm(dim=-1)
    assert torch.allclose(info['resid'], expect, rtol=1e-4, atol=1e-7)
    assert info['resid'].min() > 0


def test_resid_is_each_tokens_own_last_step_under_an_exit():
    """With per-token depth, resid is |z_k - z_(k-1)| / |z_(k-1)| of the step each token last ran (frozen ones: not
    the last step of the loop)."""
    m = make(loops=(4,)).eval()
    idx, _ = batch()
    with torch.no_grad():
        exit = ('resid', m(idx, n_loops=2)[2]['resid'].median().item())  # about half stop after step 2
        _, depth, _, resid, states = run_loop(m, idx, exit=exit)
        info = m(idx, exit=exit)[2]
    assert depth.min() < depth.max()  # tokens stop at different steps
    stacked = torch.stack(states)  # (k + 1, B, T, C): states[i] after step i (frozen ones repeat)
    d = depth[None, ..., None].expand(1, *stacked.shape[1:])
    last, before = stacked.gather(0, d)[0], stacked.gather(0, d - 1)[0]
    assert torch.allclose(info['resid'], (last - before).norm(dim=-1) / before.norm(dim=-1), rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------- 10. ACT

def act_model(loops=(4,), p=None, seed=0, **kw):
    m = make(seed, loops=loops, act=True, **kw)
    if p is not None:  # every token gets halting probability p at every step
        with torch.no_grad():
            for s in m.segments:
                s.gate.weight.zero_()
                s.gate.bias.fill_(math.log(p / (1 - p)))
    return m


@pytest.mark.parametrize("p,N,R", [(0.3, 4, 0.1), (0.6, 2, 0.4), (0.5, 2, 0.5), (0.995, 1, 1.0)])
def test_act_halting_math_constant_gate(p, N, R):
    m = act_model(p=p, halt_penalty=0.05)
    idx, tgt = batch()
    logits, loss, info = m(idx, tgt)
    assert (info['depth'] == N).all()
    assert abs(info['ponder'].item() - (N + R)) < 1e-5
    assert torch.allclose(loss, ce(logits, tgt) + 0.05 * (N + R), atol=1e-5)
    assert set(info['losses']) == {4}
    # the output is the halting-weighted mean of the step states: weights p,...,p,R
    with torch.no_grad():
        out, depth, ponder, _, states = run_loop(m, idx)
    w = [p] * (N - 1) + [R]
    assert abs(sum(w) - 1) < 1e-6
    expect = sum(wi * s for wi, s in zip(w, states[1:N + 1]))
    assert torch.allclose(out, expect, atol=1e-5)
    assert torch.allclose(ponder, torch.full_like(ponder, N + R), atol=1e-5)


def test_act_ponder_sums_over_segments():
    m = act_model(loops=(4, 4), p=0.3)
    info = m(batch()[0])[2]
    assert (info['depth'] == 8).all()
    assert abs(info['ponder'].item() - 8.2) < 1e-5


def test_act_ponder_gradient_through_remainder():
    # N=4, R = 1 - 3h: d ponder / d bias = -3 h (1 - h)
    m = act_model(p=0.3)
    m(batch()[0])[2]['ponder'].backward()
    assert abs(m.segments[0].gate.bias.grad.item() - (-3 * 0.3 * 0.7)) < 1e-5


def ref_act(m, states, eps=0.01):
    """Graves' ACT by hand, token by token, from the recorded step states and the gate."""
    gate, k = m.segments[0].gate, len(states) - 1
    hs = [torch.sigmoid(gate(s)).squeeze(-1) for s in states[1:]]
    B, T = hs[0].shape
    out, N, ponder = torch.zeros_like(states[0]), torch.zeros(B, T, dtype=torch.long), torch.zeros(B, T)
    for b in range(B):
        for t in range(T):
            cum = 0.0
            for n in range(1, k + 1):
                h = hs[n - 1][b, t].item()
                if cum + h >= 1 - eps or n == k:
                    out[b, t] += (1 - cum) * states[n][b, t]
                    N[b, t], ponder[b, t] = n, n + 1 - cum
                    break
                out[b, t] += h * states[n][b, t]
                cum += h
    return out, N, ponder


def test_act_per_token_halting_matches_hand_computation():
    m = act_model(loops=(5,))
    seg = m.segments[0]
    idx = torch.tensor([[3, 7, 11, 19, 23, 29]])
    with torch.no_grad():
        z = embed(m, idx)
        z[0, :, 0] = torch.tensor([4.0, -4.0, 0.0, 4.0, -4.0, -0.3])  # feature 0 drives the gate
        seg.gate.weight.zero_()
        seg.gate.weight[0, 0] = 3.0
        seg.gate.bias.fill_(0.0)
        states = [z.clone()]
        out, run = seg.per_token(z, 5, ACT(seg.gate, 5, z))  # the ACT gate's rule
        depth, ponder, states = run.depth, run.ponder, states + run.states
        r_out, r_N, r_ponder = ref_act(m, states)
    assert depth[0].tolist()[:2] == [1, 5]  # one token halts at once, one runs to the maximum
    assert len(depth.unique()) >= 3
    assert torch.equal(depth, r_N)
    assert torch.allclose(ponder, r_ponder, atol=1e-5)
    assert torch.allclose(out, r_out, atol=1e-5)
    # a halted token's state is frozen from its halting step on
    for t in range(idx.size(1)):
        d = depth[0, t].item()
        for s in states[d + 1:]:
            assert torch.equal(s[0, t], states[d][0, t])
    assert not torch.equal(states[5][0, 1], states[4][0, 1])  # a running token still moves


def test_act_random_gate_matches_reference_and_depth_range():
    m = act_model(loops=(6,), seed=3)
    with torch.no_grad():
        m.segments[0].gate.weight.normal_(0, 1.0)
        m.segments[0].gate.bias.fill_(-1.0)
    idx, _ = batch(3, 10)
    with torch.no_grad():
        out, depth, ponder, _, states = run_loop(m, idx)
        r_out, r_N, r_ponder = ref_act(m, states)
        info = m(idx)[2]
    assert torch.equal(depth, r_N) and torch.equal(info['depth'], depth)
    assert torch.allclose(out, r_out, atol=1e-5) and torch.allclose(ponder, r_ponder, atol=1e-5)
    assert depth.min() >= 1 and depth.max() <= 6 and len(depth.unique()) >= 2
    assert abs(info['ponder'].item() - r_ponder.mean().item()) < 1e-5


def test_act_gate_gets_gradient_without_penalty():
    m = act_model(halt_penalty=0.0, seed=1)
    with torch.no_grad():
        m.segments[0].gate.weight.normal_(0, 0.5)
        m.segments[0].gate.bias.fill_(-1.0)
    idx, tgt = batch()
    _, loss, info = m(idx, tgt)
    assert torch.allclose(loss, info['losses'][4])  # no ponder term
    loss.backward()
    g = m.segments[0].gate
    assert g.weight.grad.abs().sum() > 0 and g.bias.grad.abs() > 0


def test_act_default_gate_runs_every_token_to_the_max():
    m = act_model(loops=(6,))
    g = m.segments[0].gate
    assert torch.equal(g.weight, torch.zeros_like(g.weight)) and g.bias.item() == -3.0
    h = torch.sigmoid(torch.tensor(-3.0)).item()
    assert abs(h - 0.0474) < 1e-3
    info = m(batch()[0])[2]
    assert (info['depth'] == 6).all()
    assert abs(info['ponder'].item() - (6 + 1 - 5 * h)) < 1e-4


@pytest.mark.slow
def test_act_training_penalty_lowers_depth():
    def train(hp):
        m = act_model(loops=(4,), n_embd=32, halt_penalty=hp, seed=0)
        idx, tgt = batch(4, 16, seed=5)
        opt = m.configure_optimizers(0.0, 3e-3, (0.9, 0.95), 'cpu')
        for _ in range(30):
            loss = m(idx, tgt)[1]
            opt.zero_grad()
            loss.backward()
            opt.step()
        m.eval()
        with torch.no_grad():
            return m(idx, tgt)[2]['depth'].float().mean().item()
    high, low = train(0.5), train(0.0)
    assert low > 3.5 and high < 2.5, (high, low)


# ---------------------------------------------------------------- 10b. the learned exit distribution (ExitGate)

def exit_model(loops=(4,), supervise=(1, 2, 4), beta=0.1, seed=0, **kw):
    return make(seed=seed, loops=loops, supervise=supervise, exit_gate=True, exit_beta=beta, **kw)


def test_exit_distribution_sums_to_one_per_token():
    m = exit_model()
    with torch.no_grad():
        m.exit_gate.gate.weight.normal_(0, 2.0)  # gates that differ from token to token
    states = [torch.randn(2, 8, 16) for _ in range(2)]  # the gated depths 1 and 2 (4: the remainder)
    p = m.exit_gate.distribution(states)
    assert p.shape == (3, 2, 8) and (p >= 0).all()
    assert torch.allclose(p.sum(0), torch.ones(2, 8))
    lam = [torch.sigmoid(m.exit_gate.gate(z)).squeeze(-1) for z in states]
    assert torch.allclose(p[1], (1 - lam[0]) * lam[1]) and torch.allclose(p[2], (1 - lam[0]) * (1 - lam[1]))


def test_exit_loss_with_a_constant_gate_matches_a_hand_computation():
    """lambda = sigmoid(b) everywhere: p = (l, (1-l) l, (1-l)^2), the loss sum_t p_t NLL_t - beta H(p)."""
    m = exit_model(beta=0.1).train()
    with torch.no_grad():
        m.exit_gate.gate.bias.fill_(0.7)
    idx, tgt = batch()
    loss, info = m(idx, tgt)[1:]
    l = torch.sigmoid(torch.tensor(0.7)).item()
    p = [l, (1 - l) * l, (1 - l) ** 2]
    with torch.no_grad():  # each supervised depth's per-token NLL, from the depth's own readout
        nll = [F.cross_entropy(m(idx, n_loops=d)[0].flatten(0, 1), tgt.flatten(), reduction='none')
               for d in (1, 2, 4)]
    expected = sum(pt * n for pt, n in zip(p, nll)).mean().item()
    entropy = -sum(pt * math.log(pt) for pt in p)
    assert loss.item() == pytest.approx(expected - 0.1 * entropy, rel=1e-5)
    assert sorted(info['losses']) == [1, 2, 4]  # the per-depth losses are still logged
    loss.backward()
    assert m.exit_gate.gate.bias.grad.abs() > 0  # the gate learns from the loss


def test_a_detached_gate_keeps_its_gradient_from_the_language_model():
    """ExitGate.detached (train.py gate_detached, a control): the gate reads detached states, so the
    language model gets the gradient of sum_t p_t NLL_t with p held fixed: the entropy bonus (beta)
    no longer reaches it, while the gate still learns. Attached, beta changes the LM's gradient."""
    idx, tgt = batch()
    def grads(beta, detached):
        m = exit_model(beta=beta).train()
        with torch.no_grad():
            m.exit_gate.gate.weight.normal_(0, 1.0, generator=torch.Generator().manual_seed(5))
        m.exit_gate.detached = detached
        m(idx, tgt)[1].backward()
        assert m.exit_gate.gate.weight.grad.abs().sum() > 0
        return torch.cat([p.grad.flatten() for n, p in m.named_parameters() if 'exit_gate' not in n])
    assert torch.allclose(grads(0.1, True), grads(10.0, True), atol=1e-7)
    assert not torch.allclose(grads(0.1, False), grads(10.0, False), atol=1e-4)


def test_exit_gate_needs_supervised_depths_in_one_segment():
    with pytest.raises(ValueError, match="exit_gate"):
        cfg(exit_gate=True)  # no supervised depth to stop at
    with pytest.raises(ValueError, match="exit_gate"):
        cfg(exit_gate=True, loops=(2, 2), supervise=(1, 2))  # one segment only


def test_exit_model_cached_decoding_matches_re_encoding():
    m = exit_model(seed=3).eval()
    with torch.no_grad():
        m.exit_gate.gate.weight.normal_(0, 3.0)  # tokens that stop at different depths
    idx = batch(1, 5)[0]
    a = cached_generate(m, idx, 10, top_k=1)[0]
    assert torch.equal(a, greedy_by_hand(m, idx, 10))  # at the fixed (trained) depth: the same


# ---------------------------------------------------------------- 11. config validation

def first_broken_rule(**kw):
    """What GPTConfig says of the first of its checks that a config breaks, in words."""
    try:
        GPTConfig(**kw)
    except ValueError as e:
        return str(e).partition('GPTConfig: ')[2]


@pytest.mark.parametrize("kw,field", [
    (dict(n_embd=30, n_head=4), "n_embd"),
    (dict(loops=(2, 0)), "loops"),
    (dict(loops=(-1,)), "loops"),
    (dict(loops=(4,), supervise=(5,)), "supervise"),
    (dict(loops=(2, 2), supervise=(0,)), "supervise"),
    (dict(phantom=True, phantom_steps=0), "phantom_steps"),
    (dict(act=True, supervise=(1,)), "supervise"),
    (dict(act=True, phantom=True), "phantom"),
    (dict(alpha_init=1.0), "alpha_init"),
    (dict(n_head=0), "n_head"),
])
def test_config_rules(kw, field):
    assert first_broken_rule() is None
    assert field in first_broken_rule(**kw)


def test_config_lists_become_tuples():
    c = cfg(loops=[2, 3], supervise=[1, 5])
    assert c.loops == (2, 3) and c.supervise == (1, 5)


# ---------------------------------------------------------------- 12. generate

def greedy_by_hand(m, idx, n, **kw):
    for _ in range(n):
        logits = m(idx[:, -m.config.block_size:], **kw)[0]
        idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], 1)
    return idx


def act_gen_model():
    m = act_model(loops=(5,), seed=2)
    with torch.no_grad():
        m.segments[0].gate.weight.normal_(0, 1.0)
        m.segments[0].gate.bias.fill_(-1.0)
    return m


@pytest.mark.parametrize("kind", ["plain", "two_segments", "n_loops"])
def test_generate_kv_cache_matches_no_cache(kind):
    """At a fixed depth, cached and re-encoding generation are the same computation: same greedy tokens."""
    m = gen_model(loops=(2, 3) if kind == "two_segments" else (4,))
    m.eval()
    n_loops = 7 if kind == "n_loops" else None
    idx = batch(2, 5)[0]
    a, da = cached_generate(m, idx, 8, top_k=1, n_loops=n_loops)
    assert a.shape == (2, 13) and torch.equal(a[:, :5], idx)
    assert (da == (7 if kind == "n_loops" else sum(m.config.loops))).all()
    assert torch.equal(a, greedy_by_hand(m, idx, 8, n_loops=n_loops))
    assert len(a[:, 5:].unique()) >= 3  # varied continuations, not one token repeated


def count_calls(module):
    calls = []
    module.register_forward_hook(lambda mod, inp, out: calls.append(inp[0].shape[1]))
    return calls


@pytest.mark.parametrize("kind", ["maxprob", "resid", "act"])
def test_cached_exit_skips_the_remaining_iterations(kind):
    """With a KV cache, a new token that exits at iteration d runs the tied block d times, not k: the compute is saved."""
    if kind == "resid":
        m, t = resid_model(4)
    else:
        m, t = (act_gen_model() if kind == "act" else gen_model(loops=(4,))).eval(), 0.3
    exit = None if kind == "act" else (kind, t)
    k = m.config.loops[0]
    calls = count_calls(m.segments[0].block)
    idx = batch(1, 5)[0]
    out, depth = cached_generate(m, idx, 12, top_k=1, exit=exit)
    n_prompt = next(i for i, t in enumerate(calls) if t != 5)  # the prompt: one chunk, until all its tokens stop
    assert 1 <= n_prompt <= k
    steps = calls[n_prompt:]
    assert all(t == 1 for t in steps)  # then one token at a time
    assert len(steps) == depth[0, 1:].sum().item()  # exactly depth block calls per token fed back (depth[0, 0]: the prompt)
    assert depth.min() < k and len(depth.unique()) >= 2, "test needs tokens that exit early"


def mixed_depths(kind):
    """-> (model, exit, 12 tokens) where tokens stop at different depths: under a maxprob or resid
    exit, or ACT's gate (exit None)."""
    if kind == "resid":
        m, t = resid_model(4)
    else:
        m, t = (act_gen_model() if kind == "act" else gen_model(loops=(4,))).eval(), 0.3
    exit = None if kind == "act" else (kind, t)
    idx = batch(1, 12)[0]
    if kind != "resid":  # the model's own continuation: varied depths
        idx = cached_generate(m, idx[:, :4], 8, top_k=1, exit=exit)[0]
    return m, exit, idx


@pytest.mark.parametrize("kind", ["maxprob", "resid", "act"])
def test_one_token_decode_matches_the_batched_protocol(kind):
    """A new token decoded alone, and two copies of it at once, take Loop.per_token: the two must get what the one
    gets: depth, logits, the probe and every cache slot, skipped iterations included."""
    m, exit, idx = mixed_depths(kind)
    one, two = KVCache(m.config.block_size), KVCache(m.config.block_size)
    seen = set()
    with torch.no_grad():
        m(idx[:, :4], exit=exit, cache=one)
        m(idx[:, :4].expand(2, -1), exit=exit, cache=two)
        for t in range(4, 12):
            a = m(idx[:, t:t + 1], exit=exit, cache=one)
            b = m(idx[:, t:t + 1].expand(2, -1), exit=exit, cache=two)
            assert torch.equal(a[2]['depth'], b[2]['depth'][:1])
            assert torch.allclose(a[0], b[0][:1], atol=1e-5)
            assert torch.allclose(a[2]['resid'], b[2]['resid'][:1], atol=1e-5)
            seen.add(a[2]['depth'].item())
    assert one.kv.keys() == two.kv.keys()
    for slot, tensors in one.kv.items():
        for x, y in zip(tensors, two.kv[slot]):
            assert torch.allclose(x[:, :, :12], y[:1, :, :12], atol=1e-5), slot
    assert len(seen) >= 2, "test needs tokens that stop at different depths"


@pytest.mark.parametrize("kind", ["maxprob", "resid", "act"])
def test_a_cached_forward_under_an_exit_gives_the_uncached_logits(kind):
    """The cache changes no prediction: with per-token depth, a prompt prefilled in one chunk and
    fed a token at a time give the logits of a forward with no cache (the coda's slots after a
    per-token loop are the model's own, never rewritten by the stopped-token rule)."""
    m, exit, idx = mixed_depths(kind)
    with torch.no_grad():
        plain = m(idx, exit=exit)[0]
        chunk = m(idx, exit=exit, cache=KVCache(m.config.block_size))[0]
        cache = KVCache(m.config.block_size)
        fed = torch.cat([m(idx[:, t:t + 1], exit=exit, cache=cache)[0] for t in range(12)], 1)
    assert torch.allclose(chunk, plain, atol=1e-4) and torch.allclose(fed, plain, atol=1e-4)


@pytest.mark.parametrize("kind", ["maxprob", "resid", "act"])
def test_a_prompt_prefilled_or_fed_a_token_at_a_time_leaves_the_same_cache(kind):
    """One rule for a stopped token's later slots (decode.KVCache): a prompt prefilled in one chunk
    and the same prompt fed a token at a time give every token the same depth and logits, and
    leave the same keys and values in every slot (before, a chunk kept its stopped tokens' frozen
    states' keys, while a token alone copied its last run slot)."""
    m, exit, idx = mixed_depths(kind)
    chunk, single = KVCache(m.config.block_size), KVCache(m.config.block_size)
    with torch.no_grad():
        logits, _, info = m(idx, exit=exit, cache=chunk)
        fed = [m(idx[:, t:t + 1], exit=exit, cache=single) for t in range(12)]
    assert torch.equal(info['depth'], torch.cat([f[2]['depth'] for f in fed], 1))
    assert torch.allclose(logits, torch.cat([f[0] for f in fed], 1), atol=1e-5)
    assert chunk.kv.keys() == single.kv.keys()
    for slot, tensors in chunk.kv.items():
        for x, y in zip(tensors, single.kv[slot]):
            assert torch.allclose(x[:, :, :12], y[:, :, :12], atol=1e-5), slot
    depths = info['depth'][0, :-1]
    assert len(depths.unique()) >= 2 and depths.min() < m.config.loops[0], "needs mixed depths"


def test_skipped_iterations_reuse_the_last_computed_keys_values():
    """The cache rule: at an iteration a token skipped, later tokens read its keys/values from its last iteration."""
    m, t = resid_model(4)
    P, k, exit = m.config.n_prelude, 4, ('resid', t)
    idx = batch(1, 12)[0]
    seen = set()
    with torch.no_grad():
        cache = KVCache(m.config.block_size)
        m(idx[:, :4], exit=exit, cache=cache)
        for t in range(4, 12):
            d = m(idx[:, t:t + 1], exit=exit, cache=cache)[2]['depth'].item()
            seen.add(d)
            assert cache.pos == t + 1
            keys = lambda i: cache.kv[0, i - 1][0]  # the tied block's slot at iteration i (1-based)
            values = lambda i: cache.kv[0, i - 1][1]
            for i in range(2, k + 1):
                same = torch.equal(keys(i)[:, :, t], keys(i - 1)[:, :, t])
                assert same == (i > d), (t, d, i)  # copied iff skipped (computed keys differ from step to step)
                assert torch.equal(values(i)[:, :, t], values(i - 1)[:, :, t]) == (i > d)
    assert len(seen) >= 2 and min(seen) < k, "test needs tokens that exit early"


def test_plain_generate_is_nanogpts_and_matches_the_cached_one():
    """model.generate (no cache, no extras) samples what decode.generate samples at a fixed depth."""
    m = gen_model(loops=(2, 3)).eval()
    idx = batch(2, 5)[0]
    for kw in (dict(top_k=1), dict(top_k=1, n_loops=4)):
        assert torch.equal(m.generate(idx, 8, **kw), cached_generate(m, idx, 8, **kw)[0])
    torch.manual_seed(0)
    a = m.generate(idx, 8, temperature=0.8, top_k=5)
    torch.manual_seed(0)
    assert torch.equal(a, cached_generate(m, idx, 8, temperature=0.8, top_k=5)[0])


def test_generate_past_block_size_crops_context():
    m = make(loops=(2,))
    m.eval()
    idx = batch(2, 6)[0]
    a = cached_generate(m, idx, 20, top_k=1)[0]
    assert a.shape == (2, 26)
    assert torch.equal(a, greedy_by_hand(m, idx, 20))
    with pytest.raises(ValueError, match="block_size"):
        m(torch.zeros(1, 17, dtype=torch.long))


def test_generate_two_segments_n_loops_override():
    m = make(loops=(2, 3))
    m.eval()
    idx = batch(1, 4)[0]
    a, d = cached_generate(m, idx, 6, top_k=1, n_loops=(1, 2))
    assert torch.equal(a, greedy_by_hand(m, idx, 6, n_loops=(1, 2)))
    assert (d == 3).all()


def test_generate_tiny_top_p_and_temperature_are_greedy():
    m = make(loops=(2,))
    m.eval()
    idx = batch(3, 4)[0]
    greedy = cached_generate(m, idx, 10, top_k=1)[0]
    for seed in range(2):
        torch.manual_seed(seed)
        assert torch.equal(cached_generate(m, idx, 10, top_p=1e-6)[0], greedy)
        torch.manual_seed(seed)
        assert torch.equal(cached_generate(m, idx, 10, temperature=1e-6)[0], greedy)
    torch.manual_seed(0)
    sampled = cached_generate(m, idx, 10)[0]
    assert not torch.equal(sampled, greedy)  # plain sampling from a near-uniform model differs


class FixedLogits:
    """Replace model.forward by fixed next-token logits, and catch the distribution generate samples from."""
    def __init__(self, m, logits, monkeypatch):
        self.probs = []
        monkeypatch.setattr(m, 'forward', lambda idx, *a, **k: (logits.expand(idx.size(0), idx.size(1), -1).clone(), None,
                                                                dict(depth=torch.ones(idx.shape, dtype=torch.long))))
        orig = torch.multinomial

        def spy(p, num_samples):
            self.probs.append(p.clone())
            return orig(p, num_samples)
        monkeypatch.setattr(torch, 'multinomial', spy)


def test_generate_repetition_penalty_lowers_seen_tokens(monkeypatch):
    m = make(vocab_size=5)
    logits = torch.tensor([2.0, 1.0, -1.0, 0.5, 0.0])
    fx = FixedLogits(m, logits, monkeypatch)
    idx = torch.tensor([[0, 2, 0]])
    cached_generate(m, idx, 1, repetition_penalty=1.0)[0]
    cached_generate(m, idx, 1, repetition_penalty=1.5)[0]
    base, pen = fx.probs
    assert torch.allclose(base[0], logits.softmax(-1))
    expect = torch.tensor([2.0 / 1.5, 1.0, -1.0 * 1.5, 0.5, 0.0]).softmax(-1)
    assert torch.allclose(pen[0], expect, atol=1e-6)
    assert pen[0, 0] < base[0, 0] and pen[0, 2] < base[0, 2]  # seen tokens less likely
    assert pen[0, 1] > base[0, 1] and pen[0, 3] > base[0, 3]  # unseen ones gain


def test_generate_top_p_and_top_k_filters(monkeypatch):
    m = make(vocab_size=5)
    logits = torch.tensor([0.0, 3.0, 1.0, 2.0, -1.0])
    fx = FixedLogits(m, logits, monkeypatch)
    idx = torch.tensor([[4]])
    p = logits.softmax(-1)  # sorted: 1 (.64), 3 (.24), 2 (.09), ...
    cached_generate(m, idx, 1, top_p=0.7)[0]
    cached_generate(m, idx, 1, top_k=2)[0]
    cached_generate(m, idx, 1, top_p=1e-6)[0]
    cached_generate(m, idx, 1, temperature=0.5)[0]
    keep2 = torch.zeros(5)
    keep2[[1, 3]] = p[[1, 3]] / p[[1, 3]].sum()
    assert torch.allclose(fx.probs[0][0], keep2, atol=1e-6)
    assert torch.allclose(fx.probs[1][0], keep2, atol=1e-6)
    assert torch.equal(fx.probs[2][0], torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0]))
    assert torch.allclose(fx.probs[3][0], (logits / 0.5).softmax(-1), atol=1e-6)


def test_generate_return_depth():
    m = gen_model(loops=(4,))
    m.eval()
    idx = batch(2, 4)[0]
    out, d = cached_generate(m, idx, 6, top_k=1)
    assert d.shape == (2, 6) and d.dtype == torch.long and (d == 4).all()
    out, d = cached_generate(m, idx, 6, top_k=1, exit=('maxprob', 0.3))
    assert d.min() >= 1 and d.max() <= 4 and len(d.unique()) >= 2
    for j in range(6):  # the depth spent on the position that predicted new token j
        info = m(out[:, :4 + j], exit=('maxprob', 0.3))[2]
        assert torch.equal(d[:, j], info['depth'][:, -1])


# ---------------------------------------------------------------- 13. checkpoints

def save_good(path):
    m = make(loops=(2, 1), supervise=(1,))
    torch.save({'model': m.state_dict(), 'model_args': model_args(m.config), 'iter_num': 7,
                'meta': dict(tokenizer='byte', vocab_size=257, eot=256, dtype='uint16'),
                'config': {'dataset': 'topics_byte'}}, path)  # (as train.py saves one)
    return m


def test_checkpoint_round_trip(tmp_path):
    p = tmp_path / "ckpt.pt"
    m = save_good(p)
    m2, ck = load_checkpoint(str(p), GPT.from_checkpoint)
    assert ck['iter_num'] == 7 and m2.config == m.config and m2.config.loops == (2, 1)
    idx = batch()[0]
    m.eval()
    m2.eval()
    with torch.no_grad():
        assert torch.equal(m(idx)[0], m2(idx)[0])


class Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import builtins
        return (builtins.exec, (f"open({str(self.marker)!r}, 'w').write('pwned')",))


def test_checkpoint_with_pickled_program_is_refused(tmp_path):
    marker = tmp_path / "marker"
    p = tmp_path / "evil.pt"
    m = make()
    torch.save({'model': m.state_dict(), 'model_args': model_args(m.config), 'x': Exploit(marker)}, p)
    with pytest.raises(ValueError, match="evil.pt is not a checkpoint .*unsafe"):
        load_checkpoint(str(p), GPT.from_checkpoint)
    assert not marker.exists()
    p.write_bytes(bytes(range(256)) * 20)  # random bytes are corrupt, not unsafe
    with pytest.raises(ValueError, match="evil.pt is not a checkpoint of this version of nanoloop") as e:
        load_checkpoint(str(p), GPT.from_checkpoint)
    assert 'unsafe' not in str(e.value)


@pytest.mark.parametrize("kind", ["truncated", "random", "text", "empty", "not_a_dict", "state_dict_only", "bad_args"])
def test_bad_checkpoint_files_raise_value_error_naming_the_file(tmp_path, kind):
    good = tmp_path / "good.pt"
    save_good(good)
    p = tmp_path / f"{kind}.pt"
    if kind == "truncated":
        data = good.read_bytes()
        p.write_bytes(data[:len(data) // 2])
    elif kind == "random":
        p.write_bytes(bytes(torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(0)).tolist()))
    elif kind == "text":
        p.write_text("out_dir = 'out'\nmax_iters = 100\n")
    elif kind == "empty":
        p.write_bytes(b"")
    elif kind == "not_a_dict":
        torch.save([1, 2, 3], p)
    elif kind == "state_dict_only":
        torch.save(make().state_dict(), p)
    else:  # a dict with unknown config keys
        torch.save({'model': {}, 'model_args': {'n_layer': 3}}, p)
    with pytest.raises(ValueError, match=f"{kind}.pt"):
        load_checkpoint(str(p), GPT.from_checkpoint)


def test_missing_checkpoint(tmp_path):
    with pytest.raises(ValueError, match="nope.pt"):
        load_checkpoint(str(tmp_path / "nope.pt"), GPT.from_checkpoint)


def test_chunked_kv_cache_matches_full():
    m = gen_model(loops=(2,))
    m.eval()
    idx = batch(1, 8)[0]
    with torch.no_grad():
        full = m(idx)[0]
        cache = KVCache(m.config.block_size)
        a = m(idx[:, :4], cache=cache)[0]
        b = m(idx[:, 4:], cache=cache)[0]
    assert torch.allclose(torch.cat([a, b], 1), full, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("kw", [dict(act=True), dict(phantom=True), dict(supervise=(1, 3))])
def test_training_forward_compiles_in_one_graph(kw):
    """torch.compile of a training step sees no data-dependent branch: ACT's per-token loop stops early
    only when evaluating (no grad), so the whole loss is one graph with no break."""
    m = make(0, loops=(4,), **kw).train()
    x, y = batch(2, 8)
    explained = torch._dynamo.explain(lambda x, y: m(x, y)[1])(x, y)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


@pytest.mark.parametrize("amx, avx512_bf16", [(False, False), (True, False), (False, True), (True, True)])
def test_the_default_dtype_is_bf16_only_on_cpus_with_bf16_instructions(monkeypatch, amx, avx512_bf16):
    """dtype='' picks bf16 autocast on a CPU whose instructions make it fast, float32 on one that would
    emulate it, and to decode; the line says which and why, and the context autocasts to bf16 or not at
    all. CUDA: bf16; a dtype given is kept."""
    monkeypatch.setattr(torch.cpu, '_is_amx_tile_supported', lambda: amx)
    monkeypatch.setattr(torch.cpu, '_is_avx512_bf16_supported', lambda: avx512_bf16)

    def picked(*args, **kw):  # -> (dtype, line); the context matches the dtype
        dtype, ctx, line = autocast(*args, **kw)
        assert ctx.device == args[0].split(':')[0] and ctx.fast_dtype == torch.bfloat16
        if ctx.device == 'cpu':  # (on a machine without CUDA, a cuda context disables itself)
            assert ctx._enabled == (dtype == 'bfloat16')
        return dtype, line
    has = ' and '.join(n for n, on in (('AMX', amx), ('avx512_bf16', avx512_bf16)) if on)
    want = ('bfloat16', f'bfloat16 autocast: this CPU has {has} instructions') if has else \
        ('float32', 'float32: this CPU has no bf16 instructions')
    assert picked('cpu') == picked('cpu', '') == want
    with warnings.catch_warnings():  # "CUDA is not available ... Disabling autocast"
        warnings.simplefilter('ignore')
        assert picked('cuda') == picked('cuda:1', decode=True) == \
            ('bfloat16', 'bfloat16 autocast: the default on CUDA')
    assert picked('cpu', decode=True) == \
        ('float32', 'float32: decoding on a CPU, a token at a time (bf16 autocast is slower)')
    assert picked('cpu', 'float32') == ('float32', 'float32: --dtype=float32')
    assert picked('cpu', 'bfloat16') == ('bfloat16', 'bfloat16 autocast: --dtype=bfloat16')


# ---------------------------------------------------------------- issue 31: draws
@pytest.mark.parametrize("extra", [dict(exit_gate=True, supervise=(1,)), dict(act=True)])
def test_gates_leave_the_shared_weights_as_drawn(extra):
    """A model with a gate at seed s starts from the very weights of the same model without it:
    the gates draw no random numbers, and start at zero."""
    plain = make(seed=3).state_dict()
    other = make(seed=3, **extra).state_dict()
    for name, w in plain.items():
        assert torch.equal(w, other[name]), name
    new = [n for n in other if n not in plain]
    assert new and all(torch.count_nonzero(other[n]) == 0 for n in new if 'gate.bias' not in n)


def test_exit_gate_off_by_default_and_in_no_study_config():
    assert GPTConfig().exit_gate is False
    import glob
    for path in glob.glob('config/v*.py') + ['config/cpu_single.py', 'config/cpu_multi.py']:
        assert 'exit_gate' not in open(path).read(), path
