# v9S: the plain control v9 + the same SFT as v11. Study: with-pad 1.167 / real-token 2.940; SFT
# costs about +0.4 real-token NLL here too (v9: 2.54).
# $ python train.py config/v9S.py
include('v11.py')
init_from = 'out-v9'
out_dir = 'out-v9S'
