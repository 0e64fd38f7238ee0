# v12: multi-sandwich with two tied segments, [2 std][A x15][B x15][1 std]: the same 5 distinct
# blocks as v10. Tests loop diversity. Study: real-token NLL 2.4994 (v10: 2.508); alphas learn
# 0.057 / 0.092.
include('v5.py')
out_dir = 'out-v12'
n_prelude = 2
loops = (15, 15)
n_coda = 1
