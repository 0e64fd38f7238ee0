# v5: 23M sandwich (d=320), SINGLE-depth training at k=30. The trade-off law at the larger scale:
# strong depth scaling, failed confidence exit. Study: every k is better than at 7M; best NLL 4.251.
out_dir = 'out-v5'
dataset = 'fineweb'  # python prepare.py --dataset=fineweb (4 shards, 400M tokens)
n_embd = 320
n_head = 5
n_prelude = 2
loops = (30,)
n_coda = 2
block_size = 256
batch_size = 32
learning_rate = 6e-4
min_lr = 6e-5
max_iters = 39695
lr_decay_iters = 39695
