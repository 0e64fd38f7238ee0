# v10: the 23M tied sandwich [2 std][A x30][2 std] with FULL backprop (the default): v7 without
# phantom. Study: real-token NLL 2.508, slightly better than the plain control v9 (2.536) at equal
# parameters.
include('v5.py')
out_dir = 'out-v10'
phantom = False
