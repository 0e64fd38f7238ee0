# v8: v7 + SFT, read from the study's pairing "v7/v8 (phantom) against v10/v11 (full backprop)": the
# phantom-trained sandwich after the same SFT as v11. Its text gives no shape of its own for v8.
# Study: v8's lead was an artefact of missing controls; phantom's underfitting shows in generation.
# $ python train.py config/v8.py
include('v11.py')
init_from = 'out-v7'
out_dir = 'out-v8'
