# CPU-sized v11: cpu_single + SFT. Fine-tunes out-cpu-single (its weights and architecture; a fresh
# optimizer, from iter 0) on byte-level prompt/answer rows of 128 tokens with the pad targets
# trained (the study's "grid" SFT). Then rank PT and SFT on the SFT held-out samples and on topics:
# $ python prepare.py --dataset=sft --tokenizer=byte --block_size=128
# $ python train.py config/cpu_sft.py
# $ python eval.py --out_dir=out-cpu-single,out-cpu-sft --dataset=sft
init_from = 'out-cpu-single'
out_dir = 'out-cpu-sft'
dataset = 'sft_byte'
device = 'cpu'
dtype = 'float32'  # cpu_single's d=64: faster than bf16 autocast (lab/bf16/summary.md)
sft_pad = True
batch_size = 16
learning_rate = 1e-3
min_lr = 1e-4
max_iters = 600
lr_decay_iters = 600
warmup_iters = 30
eval_interval = 200
eval_iters = 10
log_interval = 50
