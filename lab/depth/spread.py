"""The same command and seed on two machines: lab/seeds (another machine) against lab/depth
(this one), val NLL at k=1 and k=12 for the models both trained. Writes lab/depth/spread.txt.
$ python lab/depth/spread.py"""
import json
import os
import sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # lab/
import page

results = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'lab')
lines = ['model seed | k=1 here, there, difference | k=12 here, there, difference']
for name in ('multi', 'single'):
    for seed in (1, 2, 3):
        nll = {}
        for where in ('depth', 'seeds'):
            path = os.path.join(results, where, 'runs', f'{name}-s{seed}.json')
            with open(path) as f:
                fixed = json.load(f)['val']['fixed']
            nll[where] = (fixed[0]['nll'], fixed[11]['nll'])
        cells = [f"{a:.3f}, {b:.3f}, {a - b:+.3f}" for a, b in zip(nll['depth'], nll['seeds'])]
        lines.append(f"{name} {seed} | " + ' | '.join(cells))
page.drawn(os.path.join(results, 'depth', 'spread.txt'), '\n'.join(lines) + '\n')
print('\n'.join(lines))
