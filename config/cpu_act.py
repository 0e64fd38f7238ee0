# The ACT gate at cpu_single's shape ([2 std][A x up to 12][2 std], d=64), so that it sits beside
# the fixed-depth models on the depth frontier (lab/frontier.py trains it at three halt penalties).
# $ python train.py config/cpu_act.py
include('cpu_single.py')
out_dir = 'out-cpu-act'
act = True
halt_penalty = 0.003
