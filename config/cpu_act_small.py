# A small ACT model that trains on a laptop CPU in a few minutes on the byte-level topics data:
# [std][A x up to 6][std] at d=96 with a halting gate, on cpu_single's data and schedule
# (config/cpu_act.py is another: the ACT gate at cpu_single's own shape, for the frontier).
# See config/act.py for the halt_penalty trade-off; measured here (RESULTS.md 7): 0.001 -> nearly
# every token runs all 6 loops, 0.01 -> every token stops after 1, 0.003 -> the gate chooses per
# token.
# $ python prepare.py --dataset=topics --tokenizer=byte
# $ python train.py config/cpu_act_small.py
# $ python eval.py --out_dir=out-cpu-act-small --html=out-cpu-act-small/depth.html
include('cpu_single.py')
out_dir = 'out-cpu-act-small'
n_embd = 96  # (and cpu_single's float32: at d=96 bf16 autocast is slower, 0.67x)
n_prelude = 1
loops = (6,)
n_coda = 1
act = True
halt_penalty = 0.003
