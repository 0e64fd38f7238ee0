# Beyond the study: can one model have both depth scaling and free early exit? cpu_single trained at a
# random depth each step (Huginn-style log-normal Poisson around 12, capped at 24), loss at that depth.
include('cpu_single.py')
out_dir = 'out-cpu-random'
random_depth = True
