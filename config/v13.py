# v13: the study's best, [std][A x10][B x10][C x10][std]: three tied segments, 5 distinct blocks as
# v10. Study: real-token NLL 2.4922 (best pre-training result); the alphas specialise to
# 0.059 / 0.072 / 0.126 (refiner / intermediate / main worker).
include('v5.py')
out_dir = 'out-v13'
n_prelude = 1
loops = (10, 10, 10)
n_coda = 1
