# The best recipe nanoloop has trained at this shape (RESULTS.md, "What makes the exit gate's model
# train better"): cpu_multi's multi-depth supervision plus the exit gate as a training aid. Noise
# of the gate's gradient size, tensor by tensor, gets 79% of its gain (configs' settings); plain
# noise, a fixed multiple of each gradient, about a third (tuned settings, another campaign: the
# two shares are not compared; RESULTS, "Plain gradient noise").
# exit_beta = 10 holds the exit distribution uniform, so the loss is multi-depth supervision's own
# plus the gate's. The gate's gradient reaches the language model through the states; kept to the
# first 100 steps it trains better than kept on (a finding at 750 and 1,500 steps): from then on
# the gate reads detached states (it still learns).
# lab/frontier.py trains it as `exit-10-early-1500`. Use it with or without an exit: eval.py and
# sample.py run every token all 12 loops unless --exit_at or --n_loops says otherwise.
# $ python train.py config/cpu_gate_aid.py && python eval.py --out_dir=out-cpu-gate-aid
include('cpu_exit.py')
out_dir = 'out-cpu-gate-aid'
exit_beta = 10.0
gate_detached = (100, 10**9)  # steps 100 to the end
