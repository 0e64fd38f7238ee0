"""Each bench ratio of results/redesign's A/B, per round: before the redesign (base38), after."""
import glob, os, re
import numpy as np
here = os.path.dirname(os.path.abspath(__file__))
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
print('| row | ratio | base38 (9c22461) | head38 (23938c2) | head38 minus base38 |\n'
      '| --- | --- | --- | --- | --- |')
for (row, what), by in ratios.items():
    old, new = np.array(by['base38']), np.array(by['head38'])
    d = new - old  # paired by round: the two ran one after the other
    se = d.std(ddof=1) / len(d) ** .5
    print(f"| {row} | x {what} | {' '.join(f'{v:.2f}' for v in old)} | "
          f"{' '.join(f'{v:.2f}' for v in new)} | {d.mean():+.3f} ± {se:.3f} |")
