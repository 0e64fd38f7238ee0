# v6: 23M sandwich (as v5) with MULTI-depth supervision at k in {1,2,4,8,16,30}.
# Study: free early exit (k=1 costs 0.04 NLL), no depth scaling, same best NLL as v5 (4.251).
include('v5.py')
out_dir = 'out-v6'
supervise = (1, 2, 4, 8, 16, 30)
