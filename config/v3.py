# v3: 7M sandwich, SINGLE-depth training at k=30 (loss only at the final depth).
# Tests: depth scaling. Study: NLL falls steeply with eval depth (k=1 -> 30: 6.27 -> 4.36), and
# post-hoc maxprob early exit fails (intermediate depths are confident but wrong): compare with v4.
# $ python train.py config/v3.py   then   python eval.py --out_dir=out-v3
out_dir = 'out-v3'
dataset = 'fineweb'  # python prepare.py --dataset=fineweb (4 shards, 400M tokens)
n_embd = 128
n_head = 4
n_prelude = 2
loops = (30,)
n_coda = 2
block_size = 256
batch_size = 32
learning_rate = 1e-3
max_iters = 39695
lr_decay_iters = 39695
