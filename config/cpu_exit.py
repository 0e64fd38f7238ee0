# A learned exit distribution (Ouro's stage I; PonderNet's with a uniform prior) at cpu_multi's
# shape and supervised depths: a gate at k = 1, 2, 4, 8 gives each token its chance to stop there,
# and the loss is sum_t p_t NLL_t - exit_beta * H(p). At inference a token stops where its
# cumulative exit probability reaches q: --exit_at=learned:0.5 (sample.py, bench.py).
# $ python train.py config/cpu_exit.py
# $ python sample.py --out_dir=out-cpu-exit --exit_at=learned:0.5
include('cpu_multi.py')
out_dir = 'out-cpu-exit'
exit_gate = True
exit_beta = 0.1  # (frontier.py trains it at this value; 0.01 was tried at one seed: results/exit/)
