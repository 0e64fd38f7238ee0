# Smoke test: a tiny byte-level sandwich (1 + [block x 4] + 1, d=64) on tinyshakespeare.
# Runs on a laptop CPU in well under a minute and writes out-smoke/.
# Its data, data/shakespeare_byte/, ships with the repository:
# $ python train.py config/smoke.py
out_dir = 'out-smoke'
dataset = 'shakespeare_byte'
device = 'cpu'
dtype = 'float32'  # at d=64 faster than bf16 autocast, even on a CPU with bf16 instructions
eval_interval = 100
eval_iters = 10
log_interval = 10
batch_size = 16
block_size = 64
n_embd = 64
n_head = 4
n_prelude = 1
loops = (4,)
n_coda = 1
learning_rate = 3e-3
max_iters = 400
warmup_iters = 20
lr_decay_iters = 400
min_lr = 3e-4
