# The ACT seed, sized for one consumer GPU: a ~100M-parameter sandwich (6 distinct blocks of 16.8M
# at d=1024: [std][A x4][B x4][C x4][D x4][std], plus a 51M embedding) whose tied segments each run
# up to 4 times; a per-token halting gate in every segment decides how many (Graves' ACT).
# halt_penalty is THE knob: the loss adds halt_penalty * mean(N + R). Too high and every token halts
# after one loop (no adaptivity, a 6-layer model); too low and every token runs the maximum (no
# saved compute). Sweep it (e.g. 0.001, 0.003, 0.01, 0.03) and watch "depth" in the log and
# eval.py's per-topic depths.
out_dir = 'out-act'
dataset = 'fineweb'  # python prepare.py --dataset=fineweb (4 shards, 400M tokens)
n_embd = 1024
n_head = 8
n_prelude = 1
loops = (4, 4, 4, 4)
n_coda = 1
act = True
halt_penalty = 0.01
block_size = 512
batch_size = 8
gradient_accumulation_steps = 4
learning_rate = 3e-4
min_lr = 3e-5
max_iters = 20000
lr_decay_iters = 20000
warmup_iters = 500
compile = True
