# v13S: v13 + the same SFT as v11. Study: the champion of the whole pipeline, with-pad 1.1429 /
# real-token 2.8802 (v11: 1.155 / 2.915; v9S: 1.167 / 2.940).
# $ python train.py config/v13S.py
include('v11.py')
init_from = 'out-v13'
out_dir = 'out-v13S'
