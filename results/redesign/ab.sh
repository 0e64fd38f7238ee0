# Issue 38's bench A/B: the same bench.py command in two checkouts, alternated, one thread each.
# bash results/redesign/ab.sh OLD NEW   (OLD, NEW: checkouts; writes OLD-i.md / NEW-i.md here)
# Ran as: bash results/redesign/ab.sh /work/base38 /work/head38
#   (base38: 9c22461, before the redesign; head38: 23938c2, after its steps 1-2)
here=$(cd "$(dirname "$0")" && pwd)
for i in 1 2 3; do
  for d in "$1" "$2"; do
    (cd "$d" && OMP_NUM_THREADS=1 python bench.py --n_embd=128 --k=12 --phantom_ks="(1,12)" \
      --gen_tokens=64 --repeats=3 --dtype=float32 > "$here/$(basename "$d")-$i.md" 2>&1)
  done
done
python "$here/summary.py" > "$here/summary.md"
