"""
Train a tied-depth GPT. On one CPU or GPU:
$ python train.py config/smoke.py
With DDP on one machine (nccl on CUDA, gloo on CPU):
$ torchrun --standalone --nproc_per_node=2 train.py config/smoke.py --gradient_accumulation_steps=2
Resume: add --init_from=resume. Fine-tune a run on SFT rows (init_from=<its out_dir>):
$ python train.py config/cpu_sft.py
"""
import os
import math
import time
import guards  # (first: its one entry handler covers the imports too, Ctrl-C included)
from dataclasses import asdict, fields
import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from model import GPTConfig, GPT
from decode import autocast
from prepare import sft_targets, token_rows, load_meta, load_tokens

# -----------------------------------------------------------------------------
# default config: the paper's 7M single-depth sandwich (v3) on the topics data
out_dir = 'out'
eval_interval = 500
log_interval = 10
eval_iters = 20
eval_only = False
always_save_checkpoint = True
init_from = 'scratch'  # 'scratch', 'resume', or an out_dir to fine-tune (SFT data)
dataset = 'topics'
# the model: every GPTConfig field but vocab_size (the dataset's meta.json gives it)
block_size = 256
n_embd = 128
n_head = 4
n_prelude = 2
loops = (30,)  # iterations per tied segment; () = a plain transformer
n_coda = 2
alpha_init = 0.1
phantom = False  # backprop through the last phantom_steps iterations only
phantom_steps = 1
supervise = ()  # multi-depth supervision: the global depths where the loss is also taken
act = False  # the ACT halting gate, its ponder cost weighed by halt_penalty
halt_penalty = 0.01
exit_gate = False  # a learned exit distribution over the supervised depths (Ouro)
exit_beta = 0.05  # its entropy bonus, which keeps the distribution from collapsing
gate_detached = (0, 0)  # (a, b): at steps a <= iter < b the exit gate reads detached states
dropout = 0.0
bias = False
sft_pad = True  # SFT data: train the pad targets after the answer too (the study's "grid" SFT)
gradient_accumulation_steps = 1  # global: divided among DDP processes
batch_size = 32
# AdamW and the learning-rate schedule
learning_rate = 1e-3
max_iters = 39695
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0
decay_lr = True
warmup_iters = 1000
lr_decay_iters = 39695
min_lr = 1e-4
# system
backend = ''  # '' = nccl on CUDA, gloo on CPU
device = ''   # '' = cuda if available, else cpu
dtype = ''    # '' = bfloat16 autocast on CUDA and on CPUs with bf16 instructions, else float32
compile = False
seed = 1337
overwrite = False  # True: a run from scratch may replace the checkpoint in out_dir
# -----------------------------------------------------------------------------
config_keys = [k for k, v in globals().items()
               if not k.startswith('_') and isinstance(v, (int, float, bool, str, tuple))]
defaults = {k: globals()[k] for k in config_keys}
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'configurator.py')).read())
config = {k: globals()[k] for k in config_keys}  # as this command sets them
# -----------------------------------------------------------------------------
# start: from scratch, resume this out_dir's run, or fine-tune a trained model (init_from=<dir>)
given = set(guards.GIVEN)  # the keys this command sets (a config file, the command line)
ckpt_path = os.path.join(out_dir, 'ckpt.pt')
guards.check_output(ckpt_path, 'out_dir')  # before the work starts, not when it saves
iter_num, best_val_loss, ckpt, kept = 0, float('inf'), None, {}
if init_from == 'scratch':
    pass  # the model is made below, once the data says its vocab_size
elif init_from == 'resume':
    model, ckpt = guards.load_checkpoint(ckpt_path, GPT.from_checkpoint)
    iter_num, best_val_loss = ckpt['iter_num'], ckpt['best_val_loss']
    # the run's own settings, but for the keys given here (and where it runs: RUN_ONLY)
    kept = {k: v for k, v in ckpt['config'].items() if k in config and k not in guards.RUN_ONLY}
    print(f"resuming from {ckpt_path} at iter {iter_num}")
else:
    model, ckpt = guards.load_checkpoint(os.path.join(init_from, 'ckpt.pt'), GPT.from_checkpoint,
                                         key='init_from')
    # the trained model's shape (its block_size unless given); schedule and data: this command's
    kept = {k: v for k, v in asdict(model.config).items()
            if k != 'vocab_size' and not (k == 'block_size' and k in given)}
    print(f"fine-tuning {init_from}/ckpt.pt (trained {ckpt['iter_num']} iters) from iter 0")
if ckpt:  # a key given here that the run fixes (its model, its data) must agree with it
    guards.check_kept(given, kept, config, {*asdict(model.config), 'dataset'})
config = {**config, **kept, **{k: config[k] for k in given}}  # what this command gives wins
globals().update(config)
guards.check_run(config, defaults, kept)  # the rules across keys, DDP's batch share
device = guards.get_device(device)  # '' = cuda if there is a GPU, else cpu
# the data: token streams as np.memmaps, read from disk as they are used (SFT: whole rows)
data_dir = os.path.join('data', dataset)
meta = load_meta(data_dir)
train_data = load_tokens(data_dir, 'train')
val_data = load_tokens(data_dir, 'val')
guards.check_train_data(config, meta, data_dir, train_data, val_data, iter_num, ckpt)
if meta['row']:  # SFT data: whole rows of prompt, answer, padding; a row is block_size + 1 tokens
    block_size = meta['row'] - 1
    train_data, val_data = (data.reshape(-1, meta['row']) for data in (train_data, val_data))
if init_from == 'scratch':
    torch.manual_seed(seed)  # the initial weights
    model_args = {f.name: globals()[f.name] for f in fields(GPTConfig) if f.name != 'vocab_size'}
    model = GPT(GPTConfig(**model_args, vocab_size=meta['vocab_size']))
# -----------------------------------------------------------------------------

ddp = 'RANK' in os.environ  # started by torchrun? It sets each process's rank, and how many
rank, world = int(os.environ.get('RANK', 0)), int(os.environ.get('WORLD_SIZE', 1))
if ddp:
    dist.init_process_group(backend=backend or ('nccl' if 'cuda' in device else 'gloo'))
    if 'cuda' in device:  # (get_device gave this rank its own GPU: cuda:LOCAL_RANK)
        torch.cuda.set_device(device)
micro_steps = gradient_accumulation_steps // world  # this process's share of the global batch
master = rank == 0  # only rank 0 logs and writes checkpoints
device_type = 'cuda' if 'cuda' in device else 'cpu'
dtype, ctx, precision = autocast(device, dtype)  # precision: which, and why
torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True

tokens_per_iter = gradient_accumulation_steps * batch_size * block_size

if master:  # one run at a time in out_dir; its log keeps what the checkpoint has trained
    lock = guards.lock(out_dir)
    log_path = os.path.join(out_dir, 'log.jsonl')
    guards.keep_log(log_path, iter_num if init_from == 'resume' else 0)
raw_model = model = model.to(device)
optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)
if init_from == 'resume':
    optimizer.load_state_dict(ckpt['optimizer'])
# the gates (ACT's, the exit gate) are clipped apart from the language model (see the loop)
clip_groups = [[p for n, p in raw_model.named_parameters() if ('gate' in n) == gate]
               for gate in (False, True)]
ckpt = None
if compile:
    print("compiling the model... (takes a minute)")
    model = torch.compile(model)
if ddp:
    model = DDP(model, device_ids=[torch.cuda.current_device()] if device_type == 'cuda' else None)

# every rank draws the same global batch and takes its share: N processes see what one would
def draw(data, shape, g):  # random rows: their start positions in the token stream, or SFT rows
    return torch.randint(len(data) - (block_size if data.ndim == 1 else 0), shape, generator=g)

def get_batch(data, ix):
    """Rows of block_size + 1 tokens at ix -> the inputs, and the targets (the next tokens)."""
    if data.ndim == 1:  # a token stream: ix are start positions
        xy = torch.from_numpy(token_rows(data, ix.tolist(), block_size + 1))
        x, y = xy[:, :-1], xy[:, 1:]
    else:  # SFT: ix are rows
        xy = torch.from_numpy(data[ix.numpy()].astype(np.int64))
        x, y = xy[:, :-1], sft_targets(xy, meta['eot'], sft_pad)
    if device_type == 'cuda':
        x, y = (t.pin_memory().to(device, non_blocking=True) for t in (x, y))
    return x, y

@torch.no_grad()
def estimate_loss():
    """Mean NLL at the final depth on the same batches each time. Rank 0 only: the raw model."""
    out, g, progress = {}, torch.Generator().manual_seed(seed), guards.Progress()
    raw_model.eval()
    for split, data in (('train', train_data), ('val', val_data)):
        losses = []
        for i in range(eval_iters):
            with ctx:
                _, _, info = raw_model(*get_batch(data, draw(data, (batch_size,), g)))
            losses.append(info['losses'][max(info['losses'])].item())  # at the final depth
            progress(f"  eval {split}: {i + 1}/{eval_iters} batches")  # a long eval
        out[split] = sum(losses) / len(losses)
    raw_model.train()
    print(f"iter {iter_num}: train loss {out['train']:.4f}, val loss {out['val']:.4f}")
    return out

def step_seed(*stream):
    """A 32-bit seed of its own for (seed, iter_num, stream). torch's CPU generator keeps a seed's
    low 32 bits: with (seed << 32) + iter_num, every seed drew the same batches."""
    return int(np.random.SeedSequence([seed, iter_num, *stream]).generate_state(1)[0])

def get_lr(it):  # linear warmup, then cosine decay to min_lr
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)

def save_checkpoint():
    ckpt = dict(model=raw_model.state_dict(), optimizer=optimizer.state_dict(),
                model_args=asdict(raw_model.config), iter_num=iter_num, best_val_loss=best_val_loss,
                config={k: globals()[k] for k in config_keys}, meta=meta)
    guards.save(ckpt, ckpt_path, iter_num)
    print(f"saved checkpoint to {ckpt_path} (iter {iter_num})")

def log_step(lossf, val, info, lr, dt):
    """Print the log line; its record goes to out_dir/log.jsonl, a JSON line to plot."""
    record = dict(iter=iter_num, loss=lossf, val_loss=val, lr=lr, ms=dt * 1000,
                  tok_s=tokens_per_iter / dt, alphas=raw_model.alphas(),
                  losses={k: v.item() for k, v in info['losses'].items()})
    line = f"iter {iter_num}: loss {lossf:.4f}"
    if len(info['losses']) > 1:  # multi-depth supervision: the loss at each supervised depth
        line += ", depths " + " ".join(f"k{k}:{v:.3f}" for k, v in record['losses'].items())
    if info['ponder'] is not None:  # ACT: the mean depth the gate chose
        line += f", depth {info['depth'].float().mean():.2f} ponder {info['ponder']:.2f}"
    if raw_model.config.loops:
        line += ", alpha " + "/".join(f"{a:.3f}" for a in record['alphas'])
    line += f", lr {lr:.2e}, {dt * 1000:.0f}ms/iter, {tokens_per_iter / dt:,.0f} tok/s"
    if device_type == 'cuda':  # the most GPU memory the run has held so far
        line += f", peak memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB"
    left = round((max_iters - iter_num) * dt)  # at this pace, evaluations aside
    print(f"{line}, {left // 3600}h{left // 60 % 60:02d}m{left % 60:02d}s left")
    guards.append(log_path, record)

if master:
    distinct, unrolled = raw_model.num_params()
    print(f"parameters: {distinct / 1e6:.2f}M distinct, {unrolled / 1e6:.2f}M effective "
          f"(tied blocks unrolled {raw_model.config.loops})")
if eval_only:
    if master:
        estimate_loss()
    raise SystemExit
stop = guards.Stop(ckpt_path, master)  # Ctrl-C: finish the step, save, exit
# -----------------------------------------------------------------------------
if master:
    print("ran on:", ", ".join(f"{k} {v}" for k, v in guards.ran_on().items()))
    print(f"tokens per iteration: {tokens_per_iter:,}; training from iter {iter_num} to "
          f"{max_iters} on {device}; {precision}")
last_loss, t0, read_at = None, time.time(), iter_num
while iter_num < max_iters:
    lr = get_lr(iter_num) if decay_lr else learning_rate
    for group in optimizer.param_groups:
        group['lr'] = lr
    # a step's randomness depends on (seed, iter_num, rank) only: a resumed run is bitwise the same
    gen = torch.Generator().manual_seed(step_seed(0))  # the batch: alike on all ranks
    torch.manual_seed(step_seed(1, rank))  # dropout: each rank its own
    # the global batch: gradient_accumulation_steps rows of positions; this rank's share
    ix = draw(train_data, (gradient_accumulation_steps, batch_size), gen)
    if raw_model.exit_gate is not None:  # in the window, the gate's gradient stops at the gate
        raw_model.exit_gate.detached = gate_detached[0] <= iter_num < gate_detached[1]
    loss_sum = torch.zeros((), device=device)
    rows_of_step = ix[rank * micro_steps:(rank + 1) * micro_steps]
    for micro_step, rows in enumerate(rows_of_step):
        if ddp:  # sync gradients only on the last micro step
            model.require_backward_grad_sync = micro_step == micro_steps - 1
        with ctx:
            _, loss, info = model(*get_batch(train_data, rows))
        loss = loss / micro_steps
        loss.backward()
        loss_sum += loss.detach()  # (on the device: read below, once per log_interval)
    if grad_clip != 0.0:  # the gates on their own norm: their early gradient (~9 for the exit
        # gate) must not scale down the language model's whole step
        for group in clip_groups:
            torch.nn.utils.clip_grad_norm_(group, grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    iter_num += 1
    evaluating = iter_num % eval_interval == 0 or iter_num == max_iters
    if iter_num % log_interval and iter_num > 1 and not evaluating:
        continue  # the host reads nothing: the device runs on (nanoGPT's habit)
    # once per log_interval and before every save, one read: the loss over all ranks, and
    # whether any rank was asked to stop (under DDP one all_reduce: all stop together)
    dt, t0 = (time.time() - t0) / (iter_num - read_at), time.time()
    val = estimate_loss()['val'] if master and evaluating else 0.0
    lossf, stopping = stop.read(loss_sum / world, val, ddp)
    guards.check_loss(lossf, iter_num, last_loss, raw_model.alphas(), ckpt_path, config, given)
    last_loss, read_at = lossf, iter_num
    if master:
        log_step(lossf, val if evaluating else None, info, lr, dt)
    if stopping:
        if master:
            save_checkpoint()
            print(f"interrupted after iter {iter_num}: resume with  {guards.resume_command()}")
        break
    if master and evaluating and (val < best_val_loss or always_save_checkpoint):
        best_val_loss = min(best_val_loss, val)
        save_checkpoint()
    t0 = time.time()
if ddp:
    dist.barrier()  # the other ranks wait for rank 0's last eval and save, then all end together
    dist.destroy_process_group()
stop.exit()  # a signal: exit as a shell reports it, so that `a && b` stops here
