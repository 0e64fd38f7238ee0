# CPU-sized v13: three tied segments [std][A x4][B x4][C x4][std] - the same 5 distinct blocks (and
# the same 12 loop iterations) as cpu_single's [2 std][A x12][2 std]. Finding 6: diversity inside
# the loop, and the alphas specialising.
include('cpu_single.py')
out_dir = 'out-cpu-sandwich3'
n_prelude = 1
loops = (4, 4, 4)
n_coda = 1
