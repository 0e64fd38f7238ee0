# CPU-sized v7: cpu_single trained with the 1-step phantom gradient (11 of 12 iterations without a
# graph). Finding 4: the quality gap after the same steps (memory and step time: python bench.py).
include('cpu_single.py')
out_dir = 'out-cpu-phantom'
phantom = True
phantom_steps = 1
