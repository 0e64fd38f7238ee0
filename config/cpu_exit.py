# A learned exit distribution (Ouro's stage I; PonderNet's with a uniform prior) at cpu_multi's
# shape and supervised depths: a gate at k = 1, 2, 4, 8 gives each token its chance to stop there,
# and the loss is sum_t p_t NLL_t - exit_beta * H(p). The gate shapes training only: as a stopping
# rule at inference it lost to uniform depth (RESULTS, "A trained exit"; the code left after
# c2945b8).
# $ python train.py config/cpu_exit.py
# $ python sample.py --out_dir=out-cpu-exit
include('cpu_multi.py')
out_dir = 'out-cpu-exit'
exit_gate = True
exit_beta = 0.1  # (lab/frontier.py trains it so; 0.01 was tried at one seed: lab/exit/)
