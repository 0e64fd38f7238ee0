# The early settings tuned at the cpu_* shape (d=64, RESULTS.md: "Is the gate's model a tuned
# baseline?"): warmup 100 and learning rate 4.5e-3 in place of the configs' 50 and 3e-3. They
# help single, multi and the gated model at 750 steps (multi and the gate also at 1,500); at d=192
# multi wants 1.5e-3 instead. Give it after a d=64 pretraining config (the cpu_* configs stay as
# they are, so that they reproduce lab/seeds):
# $ python train.py config/cpu_multi.py config/cpu_tuned.py --out_dir=out-cpu-multi-tuned
warmup_iters = 100
learning_rate = 4.5e-3
