# v11: v10 + SFT, the study's second stage ("grid" SFT): 28,304 steps on prompt/answer samples
# padded to the block, pad targets trained; weights and architecture from out-v10, a fresh
# optimizer. Study: with-pad suffix NLL 1.155, real-token NLL 2.915 (v10 before SFT: 2.508).
# The study gives no SFT learning rate or batch: these are nanoloop's choice.
# $ python prepare.py --dataset=sft
# $ python train.py config/v11.py
init_from = 'out-v10'
out_dir = 'out-v11'
dataset = 'sft'
sft_pad = True
batch_size = 32
learning_rate = 3e-4
min_lr = 3e-5
max_iters = 28304
lr_decay_iters = 28304
warmup_iters = 500
