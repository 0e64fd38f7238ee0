# Issue 30's bench A/B: the same bench.py command in two checkouts, alternated, one thread each.
# bash lab/bench30/ab.sh OLD NEW [DIR]  (OLD, NEW: checkouts; writes OLD-i.md, NEW-i.md and
#   summary.md in DIR, by default results/bench30)
# Ran as: bash results/bench30/ab.sh /work/base30 /work/main  (base30: 85a1af4, before issue 30)
here=$(cd "$(dirname "$0")" && pwd)
out=${3:-$(cd "$here/../../results/bench30" && pwd)}
for i in 1 2 3; do
  for d in "$1" "$2"; do
    (cd "$d" && OMP_NUM_THREADS=1 python bench.py --n_embd=128 --k=12 --phantom_ks="(1,12)" \
      --gen_tokens=64 --repeats=3 --dtype=float32 > "$out/$(basename "$d")-$i.md" 2>&1)
  done
done
python "$here/summary.py" "$out" "$(basename "$1")" "$(basename "$2")" > "$out/summary.md"
