"""Redraw the committed charts with the current eval.svg_chart (axes, ticks, gridlines, legend) from
the numbers already saved: frontier.svg from results/frontier/frontier.json, and the chart at the top
of each committed depth map from its model's eval_*.json (the token colouring is left as it was).
$ PYTHONPATH=. python results/redraw_charts.py
"""
import json, re
import eval as ev
import frontier as fr

fr.results = 'results/frontier'
fr.write(json.load(open('results/frontier/frontier.json')))
for name in ['cpu_single', 'cpu_multi', 'act_cpu']:
    report = json.load(open(f'results/eval_{name}.json'))
    exits = [(c['mean_depth'], c['nll']) for c in report['early_exit']]
    uniform = [(s['mean_depth'], s['nll']) for s in report['depth_scan']]
    uniform += [(c['mean_depth'], c['uniform_nll']) for c in report['early_exit']]
    series = [('per-token exit', 'crimson', exits), ('uniform depth', 'steelblue', uniform)]
    chart = ev.svg_chart("val NLL against mean depth", [s for s in series if s[2]])
    path = f'results/depth_{name}.html'
    page = open(path, encoding='utf-8').read()
    page = re.sub(r'<svg.*?</svg>', lambda m: chart, page, count=1, flags=re.S)
    open(path, 'w', encoding='utf-8').write(page)
    print(f"redrew the chart of {path}")
