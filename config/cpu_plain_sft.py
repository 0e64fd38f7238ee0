# CPU-sized v9S: the plain control (cpu_plain) + the same SFT as cpu_sft.
# $ python train.py config/cpu_plain_sft.py
include('cpu_sft.py')
init_from = 'out-cpu-plain'
out_dir = 'out-cpu-plain-sft'
