"""bench.py's ratios of two trees, paired run by run: FOLDER/A-<i>.md and B-<i>.md are bench.py's
outputs, run in turn (A B A B ...); writes FOLDER.md, each ratio's mean B - A over the pairs.
$ python lab/redesign/bench_pairs.py lab/redesign/bench_c2945b8 "c2945b8" "ae360c4" """
import os, re, sys, glob, statistics as st
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # lab/
import page

folder, a_name, b_name = sys.argv[1:4]
ratios = {}  # (row, what) -> {'A': [...], 'B': [...]}
for path in sorted(glob.glob(f'{folder}/[AB]-*.md')):
    for line in open(path):
        if line.startswith(('| train', '| generate')):
            cells = [c.strip() for c in line.strip().strip('|').split('|')]
            row = re.sub(r', mean depth.*', '', cells[0])
            for m in re.finditer(r"([\d.]+)x ([\w' -]+?)(?=[,:]|$)", cells[-1]):
                ratios.setdefault((row, m[2]), {}).setdefault(path.split('/')[-1][0], []).append(
                    float(m[1]))
out = [f"# bench.py's ratios, {a_name} (A) against {b_name} (B)", "",
       f"Raw outputs: {folder}/ (A-i, B-i run in turn). Written by `python "
       f"lab/redesign/bench_pairs.py {folder} {a_name} {b_name}`; a difference is the mean "
       "B - A over the pairs ± its standard error.", "",
       "| row | ratio | A | B | B - A |", "| --- | --- | --- | --- | --- |"]
for (row, what), d in ratios.items():
    diff = [b - a for a, b in zip(d['A'], d['B'])]
    se = st.stdev(diff) / len(diff) ** 0.5
    out.append(f"| {row} | x {what} | {' '.join(f'{v:.2f}' for v in d['A'])} | "
               f"{' '.join(f'{v:.2f}' for v in d['B'])} | {st.mean(diff):+.3f} ± {se:.3f} |")
page.drawn(f'{folder}.md', '\n'.join(out) + '\n')
