# cpu_v13's shape with the ACT halting gate instead of multi-depth supervision: the ACT model that
# bench.py's generation rows time beside the exits (same blocks, so the same full-depth cost).
# $ python train.py config/cpu_v13_act.py && python bench.py --init_from=out-cpu-v13,out-cpu-v13-act
include('cpu_v13.py')
out_dir = 'out-cpu-v13-act'
supervise = ()
act = True
halt_penalty = 0.001
