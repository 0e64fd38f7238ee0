# CPU-sized v10/v3: [2 std][A x12][2 std] at d=64 on byte-level topics, SINGLE-depth training
# (loss only at k=12). Findings 1 and 3: depth scaling, and post-hoc early exit failing.
# $ python prepare.py --dataset=topics --tokenizer=byte
# $ python train.py config/cpu_single.py && python eval.py --out_dir=out-cpu-single
out_dir = 'out-cpu-single'
dataset = 'topics_byte'
device = 'cpu'
dtype = 'float32'  # at d=64 bf16 autocast is slower, even on a CPU with bf16 instructions (0.5x
# float32's speed: lab/bf16/summary.md); it pays from d~192. Also keeps lab/ reproducible.
n_embd = 64
n_head = 4
n_prelude = 2
loops = (12,)
n_coda = 2
block_size = 128
batch_size = 16
learning_rate = 3e-3
min_lr = 3e-4
max_iters = 1500
lr_decay_iters = 1500
warmup_iters = 50
eval_interval = 500
eval_iters = 10
log_interval = 50
