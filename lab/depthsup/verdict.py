"""Can weighted, curriculum or consistency-trained multi-depth supervision keep multi's free early
exit and gain depth? The verdict from the campaign's runs (made at 0530f8b by campaign.sh, which
runs as written at c97602b, the last commit with the variants):
$ python lab/depthsup/verdict.py            -> lab/depthsup/verdict.md (or FOLDER/verdict.md)
Every difference is paired by seed, on the same held-out rows; a **finding** beyond t(0.975, n-1)
standard errors (lab/frontier.py's verdict). Each question is a signed difference; only a finding
answers it, either way, and a difference that is not one is 'not established', never 'the same':
- free exit: the variant's k=1 penalty (k=1 minus its best depth) against multi's (above: lost);
- depth: its NLL at the trained depth (k=12) against multi's (below: gained);
- single's depth: its k=12 NLL against single's (above: single's lost)."""
import os
import sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # lab/
import frontier as fr

RESULTS = sys.argv[1] if len(sys.argv) > 1 else os.path.join(fr.HERE, 'lab', 'depthsup')
TUNED = 'w100+lr4.5e-3'
FAMILIES = {'weighted': ['weighted-1', 'weighted-2'], 'curriculum': ['deep-first', 'shallow-first'],
            'consistency': ['consist-0.1', 'consist-1', 'consist-10']}
BASES = ['multi', 'single']

def past(run):  # val NLL at twice the trained depth (k=24)
    return run['val']['past'][0]['nll']

def past_gain(run):  # k=24 minus k=12: does NLL go on falling past the trained depth?
    return past(run) - fr.at(12)(run)

def screen(runs):
    arms = [a for a in BASES + sum(FAMILIES.values(), []) if 1 in runs.get(f'{a}+{TUNED}', {})]
    rows = [[a, *[f"{value(runs[f'{a}+{TUNED}'][1]):.3f}" for value in
                  (fr.at(1), fr.at(12), past, fr.k1_penalty)]] for a in arms]
    picks = {family: min((a for a in arms if a in members),
                         key=lambda a: fr.at(12)(runs[f'{a}+{TUNED}'][1]), default=None)
             for family, members in FAMILIES.items()}
    text = ["## The seed-1 screen\n",
            "Each family's pick: its lowest val NLL at the trained depth (k=12) at seed 1.\n",
            fr.table(['arm (+' + TUNED + ')', 'k=1', 'k=12', 'k=24', 'k=1 penalty'], rows),
            "Picks: " + ', '.join(f"{f}: `{p}`" for f, p in picks.items()) + ".\n"]
    return '\n'.join(text), [p for p in picks.values() if p]

def answers(runs, arm):
    """-> (the table's differences, the three answers) of one arm against multi and single."""
    a, m, s = (f'{x}+{TUNED}' for x in (arm, 'multi', 'single'))
    d = {'multi: NLL at k=12': fr.paired(runs, a, m, fr.at(12)),
         'multi: the k=1 penalty': fr.paired(runs, a, m, fr.k1_penalty),
         'multi: NLL at k=1': fr.paired(runs, a, m, fr.at(1)),
         'multi: NLL at k=24': fr.paired(runs, a, m, past),
         'single: NLL at k=12': fr.paired(runs, a, s, fr.at(12))}
    said = {"free exit: k=1 penalty against multi's (above: lost)": d['multi: the k=1 penalty'],
            "depth: k=12 against multi's (below: gained)": d['multi: NLL at k=12'],
            "single's depth: k=12 against single's (above: lost)": d['single: NLL at k=12']}
    return d, said

def reproduced(runs):
    """multi and single, trained here and by issue 48's campaign (lab/noise, at 7317180):
    the seeds whose val NLL at every depth is the same to the last digit, and the others."""
    noise = fr.read_runs(os.path.join(fr.HERE, 'lab', 'noise'))
    lines = []
    for arm in (f'multi+{TUNED}', f'single+{TUNED}'):
        both = sorted(set(runs.get(arm, {})) & set(noise.get(arm, {})))
        same = [s for s in both if runs[arm][s]['val']['fixed'] == noise[arm][s]['val']['fixed']]
        lines.append(f"{arm}: the same at seeds {same or 'none'} of {both}.")
    return ' '.join(lines)

def answer(diffs):  # a finding says which way; else 'not established', with the seeds' signs
    said = fr.verdict(diffs)
    if said.startswith('**'):  # '**finding** (+3.4 SE)'
        return f"{'above' if fr.stats(diffs)[0] > 0 else 'below'}: a finding {said[12:]}"
    above = f"; above at {sum(x > 0 for x in diffs)} of {len(diffs)} seeds)"
    return said if said.startswith('no verdict') else said[:-1] + above

def main():
    runs = fr.read_runs(RESULTS)
    text, picks = screen(runs)
    arms = [a for a in ['multi', 'single', *picks] if f'{a}+{TUNED}' in runs]
    seeds = {a: len(runs[f'{a}+{TUNED}']) for a in arms}
    lines = ["# Weighted, curriculum and consistency multi-depth supervision: free exit and depth"
             " in one model?\n",
             f"Written by `python lab/depthsup/verdict.py` from `lab/depthsup/runs/*.json` (made "
             f"at 0530f8b by `bash lab/depthsup/campaign.sh`, which runs as written at c97602b, "
             f"the last commit with the variants: `git checkout c97602b`). d=64, 750 steps, the "
             f"tuned settings (warmup 100, learning rate 4.5e-3), byte-level topics; val NLL on "
             f"the same 160 held-out "
             f"rows. weighted-p: depth d's loss weighs d ** p (multi: p = 0); deep-first / "
             f"shallow-first: for the first 375 steps the last depth alone / all but it, then "
             f"all; consist-w: multi plus w times the mean KL from the last depth's prediction "
             f"(no gradient into it) to each earlier supervised depth's.\n", text,
             "## The picks beside multi and single, paired by seed\n",
             fr.table(['arm', 'seeds', 'k=1', 'k=12', 'k=24', 'k=24 minus k=12', 'k=1 penalty'],
                      [[a, seeds[a], *[fr.cell(runs, f'{a}+{TUNED}', v) for v in
                                       (fr.at(1), fr.at(12), past, past_gain)],
                        fr.cell(runs, f'{a}+{TUNED}', fr.k1_penalty)] for a in arms])]
    m, s = f'multi+{TUNED}', f'single+{TUNED}'
    lines += ["### single minus multi: the trade-off at these settings\n", fr.differences(
        [(f"single minus multi: {what}", fr.paired(runs, s, m, value)) for what, value in
         (('NLL at k=12', fr.at(12)), ('the k=1 penalty', fr.k1_penalty),
          ('NLL at k=1', fr.at(1)))] + [("single minus multi: NLL at k=24",
                                         fr.paired(runs, s, m, past))])]
    said_all = {}
    for arm in [a for a in arms if a not in ('multi', 'single')]:
        d, said_all[arm] = answers(runs, arm)
        lines += [f"### {arm}\n", fr.differences([(f"{arm} minus {w}", x) for w, x in d.items()])]
    lines += ["## The maxprob exit against uniform depth at equal FLOPs\n",
              "Each threshold's NLL minus the model's own fixed-depth curve at that compute "
              "(< 0: the exit beats uniform depth).\n",
              fr.table(['model', 'policy', 't', 'MFLOPs/token', 'depth', 'NLL', 'minus uniform',
                        'verdict'], [row for a in arms for row in
                                     fr.policy_rows(runs, f'{a}+{TUNED}', 'frozen maxprob')])]
    if said_all:
        lines += ["## The answers, by the rule\n",
                  "Each variant minus multi (or single); only a finding answers a question, either "
                  "way.\n",
                  fr.table(['arm', *next(iter(said_all.values()))],
                           [[arm, *map(answer, said.values())] for arm, said in said_all.items()])]
    where = sorted({f"{x['ran_on']['commit']} ({x['ran_on']['cpu']}, torch {x['ran_on']['torch']})"
                    for per in runs.values() for x in per.values() if 'ran_on' in x})
    lines.append(f"Where the runs ran: {'; '.join(where)}. Reproduced across commits (val NLL at "
                 f"every depth, as at 7317180 in lab/noise): {reproduced(runs)}\n")
    text = '\n'.join(lines)
    with fr.written(os.path.join(RESULTS, 'verdict.md')) as f:  # whole, or the old page kept
        f.write(text)
    print(text)

if __name__ == '__main__':
    main()
