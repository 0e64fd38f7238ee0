# cpu_single trained at per-token random depth (beyond the study): each token of each step draws
# its own depth 1..12 and stops there, its state frozen while later tokens go on (the frozen-state
# protocol of post-hoc exits), so the model learns under exactly the neighbours that exits create.
# $ python train.py config/cpu_token.py
include('cpu_single.py')
out_dir = 'out-cpu-token'
token_depth = True
