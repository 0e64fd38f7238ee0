# v9: the control. A plain 5-layer transformer (no tied block) with the same distinct parameters as
# the tied sandwich (2 + 1 + 2 blocks). Study: real-token NLL 2.536 - better than phantom-trained
# tied models (3.867), slightly worse than tied with full backprop (v10, 2.508): tying is not the
# problem.
include('v5.py')
out_dir = 'out-v9'
n_prelude = 3
loops = ()
n_coda = 2
