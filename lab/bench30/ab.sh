# Issue 30's bench A/B: the same bench.py command in two checkouts, alternated, one thread each.
# bash lab/bench30/ab.sh OLD NEW [DIR]  (OLD, NEW: checkouts; writes OLD-i.md, NEW-i.md and
#   summary.md in DIR, by default lab/bench30, never over a file there: each is written
#   beside its name and renamed once whole)
# Ran as: bash lab/bench30/ab.sh /work/base30 /work/main  (base30: 85a1af4, before issue 30)
here=$(cd "$(dirname "$0")" && pwd)
out=${3:-$here/../../lab/bench30}
mkdir -p "$out" || exit 1
for f in "$out/$(basename "$1")"-{1,2,3}.md "$out/$(basename "$2")"-{1,2,3}.md "$out/summary.md"; do
  if [ -e "$f" ]; then
    echo "error: $f holds a committed measurement: it is kept; give another DIR" >&2
    exit 1
  fi
done
for i in 1 2 3; do
  for d in "$1" "$2"; do
    f="$out/$(basename "$d")-$i.md"
    (cd "$d" && OMP_NUM_THREADS=1 python bench.py --n_embd=128 --k=12 --phantom_ks="(1,12)" \
      --gen_tokens=64 --repeats=3 --dtype=float32 > "$f.tmp" 2>&1) && mv "$f.tmp" "$f" || exit 1
  done
done
python "$here/summary.py" "$out" "$(basename "$1")" "$(basename "$2")" > "$out/summary.md.tmp" \
  && mv "$out/summary.md.tmp" "$out/summary.md"
