"""The ratios of a bench A/B (ab.sh): each bench ratio per round, old and new.
$ python lab/bench30/summary.py [FOLDER OLD NEW]   (default: lab/bench30, base30 and main)"""
import glob, os, re, sys
import numpy as np
here, old_name, new_name = sys.argv[1:4] if len(sys.argv) > 3 else (
    os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lab', 'bench30'),
    'base30', 'main')
ratios = {}  # (row, which ratio) -> checkout -> [value per round]
for path in sorted(glob.glob(os.path.join(here, '*-[0-9].md'))):
    who = os.path.basename(path).rsplit('-', 1)[0]
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if len(cells) < 7 or not cells[-1] or not cells[0].startswith(('train', 'generate')):
            continue
        row = re.sub(r', mean depth.*', '', cells[0])
        for value, what in re.findall(r"([\d.]+)x ([a-z0-9 '-]+)", cells[-1]):
            ratios.setdefault((row, what.strip()), {}).setdefault(who, []).append(float(value))
print(f'| row | ratio | {old_name} | {new_name} | {new_name} minus {old_name} |\n'
      '| --- | --- | --- | --- | --- |')
for (row, what), by in ratios.items():
    old, new = np.array(by[old_name]), np.array(by[new_name])
    d = new - old  # paired by round: the two ran one after the other
    se = d.std(ddof=1) / len(d) ** .5
    print(f"| {row} | x {what} | {' '.join(f'{v:.2f}' for v in old)} | "
          f"{' '.join(f'{v:.2f}' for v in new)} | {d.mean():+.3f} ± {se:.3f} |")
