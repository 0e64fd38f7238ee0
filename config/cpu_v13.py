# CPU-sized v13, the shape bench.py's generation rows load: [1 std][A x10][B x10][C x10][1 std] at
# d=256 on byte-level topics, multi-depth supervision (so a per-token exit has confident readouts to
# stop on), and a 320-token context, so 256 new tokens fit after a 64-token prompt without
# re-encoding.
# $ python train.py config/cpu_v13.py && python bench.py --init_from=out-cpu-v13
include('cpu_single.py')
out_dir = 'out-cpu-v13'
n_embd = 256
dtype = ''  # (not cpu_single's float32) at d=256 bf16 autocast is ~2x faster where the CPU has bf16
learning_rate = 1.5e-3
min_lr = 1.5e-4
n_prelude = 1
loops = (10, 10, 10)
n_coda = 1
supervise = (5, 10, 15, 20, 25)
block_size = 320
batch_size = 4
max_iters = 800
lr_decay_iters = 800
eval_interval = 400
log_interval = 100
