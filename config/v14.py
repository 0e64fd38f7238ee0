# v14: four tied segments and NO final standard block, [std][A x8][B x8][C x7][D x7]: 5 distinct
# blocks. Study: worse than v10 (one segment) - too few iterations per segment and no output-side
# block; the last alpha inflates to 0.261 (others 0.07-0.15): the loop degenerates into an ordinary
# layer.
include('v5.py')
out_dir = 'out-v14'
n_prelude = 1
loops = (8, 8, 7, 7)
n_coda = 0
