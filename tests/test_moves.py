"""Behaviours that a one-line change to the code would break and no other test would notice: the learning-rate
schedule, each step's batch seed, each DDP rank's dropout seed, 2 DDP processes against 1 with the same global
batch, the depth whose val loss picks the kept checkpoint, the exit gate's loss mask, eval.py's per-topic depth
over real tokens only, and a sample's document boundary. Each checks what a run logs or saves, or what the model
computes, against a value worked out here from the documented rule."""
import json, math, re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dataclasses import asdict
from model import GPT, GPTConfig
from harness import *  # noqa: F401,F403  (helpers and the jobs/job fixtures)

F32 = ['--dtype=float32']  # no bf16 autocast where the CPU has it: the runs are compared in float32


def model_of(ckpt):
    m = GPT(GPTConfig(**ckpt['model_args']))
    m.load_state_dict(ckpt['model'])
    return m.eval()


# ---------------------------------------------------------------- 1. the learning-rate schedule
LR, MIN_LR, WARMUP, DECAY, ITERS = 1e-3, 1e-4, 3, 8, 10


def nanogpt_lr(it):
    """nanoGPT's: linear warmup lr * (it + 1) / (warmup + 1), cosine to min_lr at lr_decay_iters, then min_lr."""
    if it < WARMUP:
        return LR * (it + 1) / (WARMUP + 1)
    if it > DECAY:
        return MIN_LR
    return MIN_LR + 0.5 * (1 + math.cos(math.pi * (it - WARMUP) / (DECAY - WARMUP))) * (LR - MIN_LR)


@work
def learning_rate_schedule_is_warmup_then_cosine_to_min_lr(d):
    make_data(d)
    r = run(d, 'train.py', *TINY, *F32, f'--learning_rate={LR}', f'--min_lr={MIN_LR}', f'--warmup_iters={WARMUP}',
            f'--lr_decay_iters={DECAY}', f'--max_iters={ITERS}', '--eval_interval=1000')
    return r, d


def test_learning_rate_schedule_is_warmup_then_cosine_to_min_lr(job):
    r, d = job
    logged = {int(i): float(lr) for i, lr in re.findall(r'^iter (\d+): loss .*\blr (\S+),', ok(r), re.M)}
    assert sorted(logged) == list(range(1, ITERS + 1)), logged
    for n, lr in logged.items():  # the line after step it = n - 1 shows the lr that step used, to 3 digits
        want = nanogpt_lr(n - 1)
        assert abs(lr - want) <= 5.01e-3 * want, (n - 1, lr, want)
    assert nanogpt_lr(0) > 0 and nanogpt_lr(ITERS - 2) == MIN_LR  # (the cases the schedule has are covered)
    groups = load(d / 'out' / 'ckpt.pt')['optimizer']['param_groups']
    assert all(g['lr'] == pytest.approx(nanogpt_lr(ITERS - 1), rel=1e-12) for g in groups)  # the last step's


# ---------------------------------------------------------------- 2. each step's batch: from (seed, iter)
def hand_run(root, m, out='out'):
    """root/<out>/ckpt.pt of model m as train.py writes one (untrained, iter 0), for data/tiny (byte tokens)."""
    (root / out).mkdir()
    torch.save(dict(model=m.state_dict(), model_args=asdict(m.config), iter_num=0, meta=META,
                    config=dict(dataset='tiny', block_size=m.config.block_size, device='cpu')), root / out / 'ckpt.pt')


@work
def two_seeds_share_no_batch_and_no_two_steps_repeat_one(d):
    """Fine-tuning one model (the same weights whatever the seed) at a learning rate too small to move them: each
    logged loss is then that of the step's batch alone. The model's logits are large (its embedding, tied to the
    head, x30), so that the loss of a batch tells it from another. Seeds 1 and 2, 3 steps each."""
    make_data(d)
    torch.manual_seed(0)
    m = GPT(GPTConfig(block_size=32, vocab_size=257, n_embd=32, n_head=2, n_prelude=1, loops=(2,), n_coda=1))
    with torch.no_grad():
        m.wte.weight.mul_(30)
    hand_run(d, m)
    still = ['--init_from=out', '--learning_rate=1e-30', '--decay_lr=False', '--weight_decay=0', '--max_iters=3',
             '--eval_interval=1000', *F32]
    return [run(d, 'train.py', *TINY, *still, f'--seed={s}', f'--out_dir=seed{s}') for s in (1, 2)], d


def test_two_seeds_share_no_batch_and_no_two_steps_repeat_one(job):
    (one, two), d = job
    w0 = load(d / 'out' / 'ckpt.pt')['model']
    w1 = load(d / 'seed1' / 'ckpt.pt')['model']
    assert all(torch.equal(w0[k], w1[k]) for k in w0)  # the weights did not move: each loss is its batch's
    logged = {(s, int(i)): float(v) for s, r in ((1, one), (2, two))
              for i, v in re.findall(r'^iter (\d+): loss (\S+),', ok(r), re.M)}
    assert sorted(logged) == [(s, i) for s in (1, 2) for i in (1, 2, 3)], logged
    # with seed + iter (or no seed), seed 1's step 1 would replay seed 2's step 0 (or seed 1's step 0); no iter:
    # every step the same batch. A shared batch gives the very same loss here; two batches, losses far apart
    values = sorted(logged.values())
    assert min(b - a for a, b in zip(values, values[1:])) > 1e-3, logged


# ---------------------------------------------------------------- 3. each DDP rank its own dropout
def ddp_pair(d, *args):
    """2 gloo ranks with the environment torchrun gives them (a free port: tests run side by side) -> rank 0's."""
    rank0, rank1 = ddp_ranks(d, *args, '--backend=gloo')
    ok(rank1)
    return ok(rank0)


@work
def each_ddp_rank_draws_its_own_dropout(d):
    """Every row of every batch the same text (a train.bin of one repeated byte), so 2 ranks of one micro step
    each differ from 1 process of one micro step only by their dropout masks."""
    make_data(d)
    np.full(2000, ord('a'), np.uint16).tofile(d / 'data' / 'tiny' / 'train.bin')
    common = [*TINY, *F32, '--max_iters=2', '--eval_interval=1000']
    for p in (0.0, 0.3):
        ddp_pair(d, *common, f'--dropout={p}', '--gradient_accumulation_steps=2', f'--out_dir=ddp{p}')
        ok(run(d, 'train.py', *common, f'--dropout={p}', '--gradient_accumulation_steps=1', f'--out_dir=one{p}'))
    return d


def test_each_ddp_rank_draws_its_own_dropout(job):
    d = job
    gap = {}
    for p in (0.0, 0.3):
        a, b = (load(d / f'{name}{p}' / 'ckpt.pt')['model'] for name in ('ddp', 'one'))
        gap[p] = max((a[k] - b[k]).abs().max().item() for k in a)
    assert gap[0.0] < 1e-6, gap  # without dropout the 2 ranks compute what the 1 process does
    assert gap[0.3] > 1e-5, gap  # with it, rank 1's masks are not rank 0's (alike, the mean gradient would be rank 0's)


# ---------------------------------------------------------------- 4. 2 DDP processes, 1 process: the same run
@work
def ddp_two_processes_match_one_process(d):
    """2 gloo processes, started with the environment torchrun gives them, vs 1 process with the same global batch."""
    make_data(d)
    args = [*TINY, '--max_iters=5', '--eval_interval=3', '--gradient_accumulation_steps=2']
    single = start(d, 'train.py', *args, '--out_dir=single')
    return d, ddp_ranks(d, *args, '--backend=gloo', '--out_dir=ddp'), finish(single)


def test_ddp_two_processes_match_one_process(job):
    d, (rank0, rank1), single = job
    rank0, rank1, single = ok(rank0), ok(rank1), ok(single)
    ddp_losses, one_losses = losses(rank0), losses(single)
    assert sorted(ddp_losses) == sorted(one_losses) == list(range(1, 6))
    for i in one_losses:
        assert abs(ddp_losses[i] - one_losses[i]) < 1e-4, (i, ddp_losses[i], one_losses[i])
    for i in range(1, 6):  # each log line once, from rank 0 only
        assert len(re.findall(rf'^iter {i}: loss', rank0, re.M)) == 1
    assert not re.search(r'^iter \d+:', rank1, re.M), rank1
    assert rank0.count('saved checkpoint') == 2 and 'saved checkpoint' not in rank1  # at iter 3 and 5, by rank 0
    a, b = load(d / 'ddp' / 'ckpt.pt'), load(d / 'single' / 'ckpt.pt')
    assert a['iter_num'] == b['iter_num'] == 5
    for k in a['model']:
        torch.testing.assert_close(a['model'][k], b['model'][k], atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------- 5. the val loss that picks the checkpoint
@work
def val_loss_is_the_full_depths(d):
    """Multi-depth supervision at depth 1 of 3, one step from a model whose tied block's weights (x10) make the
    depths' losses far apart; a val.bin of one repeated byte, so every val batch is the same."""
    make_data(d)
    np.full(500, ord('e'), np.uint16).tofile(d / 'data' / 'tiny' / 'val.bin')
    arch = dict(loops=(3,), supervise=(1,), alpha_init=0.5)
    torch.manual_seed(0)
    m = GPT(GPTConfig(block_size=32, vocab_size=257, n_embd=32, n_head=2, n_prelude=1, n_coda=1, **arch))
    with torch.no_grad():
        for p in m.segments[0].block.parameters():
            p.mul_(10 if p.dim() >= 2 else 1)
    hand_run(d, m, 'base')
    ok(run(d, 'train.py', *TINY, *F32, *(f'--{k}={v}' for k, v in arch.items()), '--init_from=base', '--max_iters=1',
           '--eval_interval=1'))
    return load(d / 'out' / 'ckpt.pt')


def test_val_loss_is_the_full_depths(job):
    ckpt = job
    m = model_of(ckpt)
    x = torch.full((1, 32), ord('e'))
    with torch.no_grad():
        nll = {k: F.cross_entropy(m(x, n_loops=k)[0].flatten(0, 1), x.flatten()).item() for k in (1, 2, 3)}
    assert min(abs(nll[3] - nll[1]), abs(nll[3] - nll[2])) > 1e-2, nll  # the depths are told apart
    assert ckpt['iter_num'] == 1
    assert ckpt['best_val_loss'] == pytest.approx(nll[3], abs=1e-5), (ckpt['best_val_loss'], nll)


# ---------------------------------------------------------------- 6. the exit gate's loss ignores ignored targets
def gated_model():
    torch.manual_seed(0)
    m = GPT(GPTConfig(block_size=16, vocab_size=50, n_embd=16, n_head=2, n_prelude=1, loops=(3,), n_coda=1,
                      supervise=(1, 2), exit_gate=True, exit_beta=0.5))
    with torch.no_grad():  # a gate that is not uniform: the exit distribution varies with the token
        m.exit_gate.gate.weight.normal_(0, 1.0)
    return m.train()  # (dropout 0: training mode only switches the exit gate's loss on)


def test_exit_gate_loss_ignores_ignored_targets():
    m = gated_model()
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, 50, (2, 8), generator=g)
    y = torch.randint(0, 50, (2, 8), generator=g)
    real = torch.rand(2, 8, generator=g) > 0.4
    real[:, -2:] = False  # (an SFT row's padding: its last targets)
    real[0, 0] = True
    loss = lambda keep, x=x, y=y: m(x, torch.where(keep, y, -1))[1]
    with torch.no_grad():
        alone = {}  # the loss with one real target: that token's own term
        for b, t in real.nonzero().tolist():
            one = torch.zeros_like(real)
            one[b, t] = True
            alone[b, t] = loss(one).item()
        # the loss is the mean of the real targets' terms, the ignored ones nowhere in it
        assert loss(real).item() == pytest.approx(sum(alone.values()) / len(alone), abs=1e-5)
        # ignored last targets: the same loss as the rows without those positions (attention is causal)
        assert loss(real).item() == pytest.approx(loss(real[:, :-2], x[:, :-2], y[:, :-2]).item(), abs=1e-5)
        assert max(alone.values()) - min(alone.values()) > 0.1  # (the tokens' terms differ: a mean that tells)
        assert m(x, y)[1].item() != pytest.approx(loss(real).item(), abs=1e-3)  # (masking does change it)


# ---------------------------------------------------------------- 7. eval.py: a topic's mean depth over real tokens
K = 4
TEXTS = {'code': ['def g(y): return y+1', 'x=1'], 'chat': ['hi', 'how are you'], 'news': ['Stocks rose today']}


def act_run(root):
    """An ACT checkpoint whose gate halts a token at step 1 where its input is a space or EOT (every pad is EOT),
    and runs every other token all K steps: every block is the identity (zero output projections), no position
    embedding, and embedding dimension 0 is +1 for those two tokens, -1 for the rest, which the gate reads."""
    d = root / 'data' / 'tiny'
    d.mkdir(parents=True)
    ids = np.array(list(b'the cat sat on the mat. ' * 20) + [256], np.uint16)
    ids.tofile(d / 'train.bin'), ids.tofile(d / 'val.bin')
    (d / 'meta.json').write_text(json.dumps(META))
    docs = [dict(topic=t, text=s) for t, texts in TEXTS.items() for s in texts]
    (d / 'eval.jsonl').write_text(''.join(json.dumps(doc) + '\n' for doc in docs))
    cfg = GPTConfig(block_size=32, vocab_size=257, n_embd=16, n_head=2, n_prelude=1, loops=(K,), n_coda=1, act=True)
    torch.manual_seed(0)
    m = GPT(cfg)
    with torch.no_grad():
        for block in [*m.prelude, *(s.block for s in m.segments), *m.coda]:
            block.attn.proj.weight.zero_()
            block.mlp.proj.weight.zero_()
        m.wpe.weight.zero_()
        m.wte.weight[:, 0] = -1.0
        m.wte.weight[[ord(' '), 256], 0] = 1.0
        m.segments[0].gate.weight[0, 0] = 10.0
    hand_run(root, m)
    return m


@work
def eval_topic_depth_is_over_real_tokens_only(d):
    m = act_run(d)
    r = run(d, 'eval.py', '--out_dir=out', '--eval_iters=1', '--batch_size=4', '--device=cpu', '--dtype=float32')
    return r, m, json.loads((d / 'out' / 'eval.json').read_text()) if r.returncode == 0 else None


def test_eval_topic_depth_is_over_real_tokens_only(job):
    r, m, report = job
    ok(r)
    x = torch.full((1, 32), 256)
    x[0, :12] = torch.tensor(list(b'a b\xc3\xa9 cd e f'))
    with torch.no_grad():  # the gate does what act_run says: 1 step on a space or EOT, K on the rest
        depth = m.eval()(x)[2]['depth'][0]
    assert depth.tolist() == [1 if t in (32, 256) else K for t in x[0].tolist()], depth
    assert report['depth_source'] == 'the ACT gate'
    for topic, texts in TEXTS.items():
        # the real targets are each document's bytes then its EOT: predicted from the document's bytes, each
        # of which ran 1 step (a space) or K; the padding after the EOT (1 step each) must not count
        inputs = [t for s in texts for t in s.encode()]
        want = sum(1 if t == ord(' ') else K for t in inputs) / len(inputs)
        got = report['topics'][topic]
        assert got['tokens'] == len(inputs) and got['mean_depth'] == pytest.approx(want, abs=1e-6), (topic, got, want)


# ---------------------------------------------------------------- 8. a sample shows each document boundary
@work
def sample_shows_a_document_boundary(d):
    """A model that always predicts EOT: its samples must show each boundary, not run on."""
    untrained(d)
    ckpt = torch.load(d / 'out' / 'ckpt.pt', weights_only=True)
    model = GPT(GPTConfig(**{**ckpt['model_args'], 'bias': True}))
    with torch.no_grad():  # the last state is ln_f's bias, all ones: the logits are wte @ 1
        model.ln_f.weight.zero_(), model.ln_f.bias.fill_(1.0), model.wte.weight.zero_()
        model.wte.weight[256] = 1.0
    ckpt.update(model=model.state_dict(), model_args=asdict(model.config))
    torch.save(ckpt, d / 'out' / 'ckpt.pt')
    args = (*SAMPLE, '--start=hi', '--temperature=0', '--max_new_tokens=2')
    return run(d, *args), run(d, *args, '--show_depth=True')


def test_sample_shows_a_document_boundary(job):
    plain, painted = job
    assert 'hi<|endoftext|><|endoftext|>\n' in ok(plain)  # it printed 'hi' and nothing more
    assert ok(painted).count('<|endoftext|>') == 2
