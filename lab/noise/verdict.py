"""Is the gate recipe's lead plain gradient noise? The verdict from the campaign's runs
(lab/noise/runs/*.json, made at 7317180), every difference paired by seed, val NLL at k=12:
$ python lab/noise/verdict.py            -> lab/noise/verdict.md
The rule (RESULTS.md): plain noise is the recipe if it gets at least 80% of the gate recipe's lead
over multi and the difference between the two is not a finding (t(0.975, n-1) standard errors)."""
import os, sys, glob, json, math
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # lab/
import page

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..')
RUNS = os.path.join(ROOT, 'lab', 'noise', 'runs')
T975 = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776, 6: 2.571, 7: 2.447, 8: 2.365}
TUNED = 'w100+lr4.5e-3'

def runs():  # -> {model: {seed: run}}
    out = {}
    for path in glob.glob(os.path.join(RUNS, '*.json')):
        name, seed = os.path.basename(path)[:-5].rsplit('-s', 1)
        out.setdefault(name, {})[int(seed)] = json.load(open(path))
    return out

def nll(run, k=12):  # val NLL at fixed depth k (a plain transformer: its one depth)
    fixed = run['val']['fixed']
    return next((p['nll'] for p in fixed if p['t'] == k), fixed[-1]['nll'])

def paired(a, b, k=12):  # [a minus b] over the seeds both have
    return [nll(a[s], k) - nll(b[s], k) for s in sorted(set(a) & set(b))]

def stats(d):
    d = np.array(d, float)
    se = d.std(ddof=1) / math.sqrt(len(d)) if len(d) > 1 else float('nan')
    return d.mean(), se

def verdict(d):
    mean, se = stats(d)
    if len(d) < 3:
        return f"no verdict ({len(d)} seeds)"
    word = "**finding**" if abs(mean) > T975[len(d)] * se else "not established"
    return f"{word} ({mean / se:+.1f} SE)"

def row(what, d):
    mean, se = stats(d)
    return f"| {what} | {len(d)} | {mean:+.3f} ± {se:.3f} | {verdict(d)} |"

def main():
    r = runs()
    multi, gate = r.get(f'multi+{TUNED}', {}), r.get(f'exit-10-early+{TUNED}', {})
    screen = sorted((float(n.rsplit('+n', 1)[1]), n) for n in r
                    if n.startswith(f'multi+{TUNED}+n') and 1 in r[n])
    lines = ["# Plain gradient noise against the gate recipe: is the recipe's lead plain noise?\n",
             "Written by `python lab/noise/verdict.py` from `lab/noise/runs/*.json` (made at "
             "7317180; `bash lab/noise/campaign.sh` runs as written at 366017d, the last commit "
             "with `--grad_noise`: `git checkout 366017d`). Val NLL at k=12 (a plain "
             "transformer: its own depth), d=64, 750 steps, the tuned settings (warmup 100, "
             "learning rate 4.5e-3); noise: `--grad_noise=r` in steps 0-99. A difference is "
             "paired by seed and is a **finding** beyond t(0.975, n-1) standard errors.\n",
             "## The seed-1 screen of r\n", "| model | val NLL at k=12, seed 1 |", "| --- | --- |"]
    for name in [f'multi+{TUNED}', f'exit-10-early+{TUNED}', *[n for _, n in screen]]:
        if 1 in r.get(name, {}):
            lines.append(f"| {name} | {nll(r[name][1]):.3f} |")
    best = min(screen, key=lambda x: nll(r[x[1]][1]))[1] if screen else None
    lines += [f"\nThe best r at seed 1: `{best}`.\n" if best else "",
              "## The best r beside multi and the gate recipe\n",
              "| difference (k=12) | seeds | mean ± SE | verdict |", "| --- | --- | --- | --- |"]
    if best:
        noise = r[best]
        lead, got = paired(gate, multi), paired(noise, multi)
        lines += [row("gate recipe minus multi (the lead)", lead),
                  row(f"{best} minus multi", got), row(f"{best} minus the gate recipe",
                                                       paired(noise, gate)),
                  row("gate recipe minus multi at k=1", paired(gate, multi, 1)),
                  row(f"{best} minus multi at k=1", paired(noise, multi, 1))]
        seeds = sorted(set(gate) & set(multi) & set(noise))
        shares = [(nll(noise[s]) - nll(multi[s])) / (nll(gate[s]) - nll(multi[s])) for s in seeds]
        if len(shares) >= 2:
            m, se = stats(shares)
            t = T975.get(len(shares), 2.0)
            lines.append(f"\nThe share of the lead that the noise gets, seed by seed: "
                         f"{', '.join(f'{x:.0%}' for x in shares)}; mean {m:.0%} ± {se:.0%} "
                         f"(95% interval {m - t * se:.0%} to {m + t * se:.0%}, {len(shares)} "
                         f"seeds); the ratio of the mean differences: "
                         f"{np.mean(got) / np.mean(lead):.0%}.")
            wins = m >= 0.8 and not verdict(paired(noise, gate)).startswith('**')
            said = 'plain noise is the recipe' if wins else 'the gate recipe stays'
            lines.append(f"\nThe rule (at least 80% of the lead, and the noise minus the gate not "
                         f"a finding): {said}.\n")
        r_value = best.rsplit('+n', 1)[1]
        lines += ["## A looped-model effect? Single and the plain transformer\n",
                  "| difference (k=12) | seeds | mean ± SE | verdict |",
                  "| --- | --- | --- | --- |"]
        for base in ('single', 'plain'):
            a, b = r.get(f'{base}+{TUNED}+n{r_value}', {}), r.get(f'{base}+{TUNED}', {})
            if a and b:
                lines.append(row(f"{base}+{TUNED}+n{r_value} minus {base}+{TUNED}", paired(a, b)))
    where = sorted({f"{x['ran_on']['commit']} ({x['ran_on']['cpu']}, torch {x['ran_on']['torch']})"
                    for per in r.values() for x in per.values() if 'ran_on' in x})
    lines.append(f"\nWhere the runs ran: {'; '.join(where)}.\n")
    text = '\n'.join(lines)
    out = os.path.join(ROOT, 'lab', 'noise', 'verdict.md')
    page.drawn(out, text)
    print(text)

if __name__ == '__main__':
    main()
