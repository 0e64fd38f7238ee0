# CPU-sized v9: the plain control of cpu_single. A 5-layer transformer (3 + 2 blocks, no tied block)
# with the same distinct parameters as the tied sandwich, trained the same way: the 2x2's "plain".
# $ python train.py config/cpu_plain.py && python eval.py --out_dir=out-cpu-plain
include('cpu_single.py')
out_dir = 'out-cpu-plain'
n_prelude = 3
loops = ()
n_coda = 2
