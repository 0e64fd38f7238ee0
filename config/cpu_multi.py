# CPU-sized v4/v6: cpu_single with MULTI-depth supervision at k in {1,2,4,8,12}, same steps and
# tokens. Finding 2: free early exit (k=1 close to the best), depth scaling mostly gone.
include('cpu_single.py')
out_dir = 'out-cpu-multi'
supervise = (1, 2, 4, 8, 12)
