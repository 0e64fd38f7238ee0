"""The share of the gate recipe's lead (exit-10-early minus multi, val NLL at k=12) that the noise
sham gets (exit-10-sham-noise minus multi), from lab/tuned's committed runs, paired by seed:
$ python lab/tuned/sham_share.py            -> lab/tuned/sham_share.txt
Seed by seed, the ratio of the mean differences, and Fieller's 95% interval for that ratio
(t(0.975, n-1), the two differences' paired covariance)."""
import math, os, sys
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # lab/
import frontier as fr
import page

HERE = os.path.dirname(os.path.abspath(__file__))

def fieller(a, b, t):  # -> the 95% interval of mean(a) / mean(b), a and b paired
    n, ma, mb = len(a), np.mean(a), np.mean(b)
    va, vb, cab = np.var(a, ddof=1) / n, np.var(b, ddof=1) / n, np.cov(a, b)[0, 1] / n
    qa, qb, qc = mb ** 2 - t * t * vb, -2 * (ma * mb - t * t * cab), ma ** 2 - t * t * va
    root = math.sqrt(qb * qb - 4 * qa * qc)
    return (-qb - root) / (2 * qa), (-qb + root) / (2 * qa)

def main():
    runs = fr.read_runs(HERE)
    sham = fr.paired(runs, 'exit-10-sham-noise', 'multi', fr.at(12))
    lead = fr.paired(runs, 'exit-10-early', 'multi', fr.at(12))
    low, high = fieller(sham, lead, fr.T975[len(sham)])
    text = (f"exit-10-sham-noise minus multi over exit-10-early minus multi, val NLL at k=12, "
            f"{len(sham)} seeds (lab/tuned/runs, the configs' settings, 750 steps)\n"
            f"by seed: {', '.join(f'{s / g:.0%}' for s, g in zip(sham, lead))}\n"
            f"the ratio of the mean differences: {np.mean(sham) / np.mean(lead):.0%}\n"
            f"Fieller's 95% interval: {low:.0%} to {high:.0%}\n")
    page.drawn(os.path.join(HERE, 'sham_share.txt'), text)
    print(text, end='')

if __name__ == '__main__':
    main()
