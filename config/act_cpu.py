# A small ACT model that trains on a laptop CPU in a few minutes on the byte-level topics data:
# [std][A x up to 6][std] at d=96 with a halting gate. See config/act.py for the halt_penalty trade-off;
# measured here (README, Results): 0.001 -> every token runs all 6 loops, 0.01 -> every token stops after 1,
# 0.003 -> in between, and the gate does choose per token.
# $ python prepare.py --dataset=topics --tokenizer=byte
# $ python train.py config/act_cpu.py && python eval.py --out_dir=out-act-cpu --html=depth.html
out_dir = 'out-act-cpu'
dataset = 'topics_byte'
device = 'cpu'
n_embd = 96
n_head = 4
n_prelude = 1
loops = (6,)
n_coda = 1
act = True
halt_penalty = 0.003
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
