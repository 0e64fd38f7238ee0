"""GUIDE.md teaches from the code as it is, and shows what its commands really print. Its conventions:
- a ```python block whose first line is `# <file>.py` quotes that file: every other line is a line of the file
  (indentation and spacing aside); the runs of lines between `...` lines each stand together in the file, in
  the file's order;
- a ```sh block followed at once by a ```text block is a command and what it printed. Run in the page's order
  in a copy of the repository, each must print every line of its text block, in that order (other lines may
  come between; `...` stands for lines left out). Numbers may differ (timings, training, another CPU) unless
  the block is ```text exact. train.py runs 30 steps instead of its config's: its lines keep their form;
- `Class.method` in backticks names a method that exists; the page names no issue and no commit (a reader
  has neither): links name their target by its question."""
import os, re, shutil, subprocess, sys
from pathlib import Path

import pytest

from harness import finish, start
from test_commands import script_and_args

REPO = Path(__file__).resolve().parents[1]
GUIDE = (REPO / 'GUIDE.md').read_text()
SHORT = ' --max_iters=30 --lr_decay_iters=30'  # what a guide's train.py command runs with here
NUMBER = r'[-+]?(?:\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?|nan|inf)'


def squash(line):
    return ' '.join(line.split())


def fences(text):
    """-> [(info string, body)] of the page's fenced blocks, in order."""
    return re.findall(r'^ *```([^\n]*)\n(.*?)^ *```', text, re.M | re.S)


def quotes(text):
    """-> [(file, [run of quoted lines, ...])] of the blocks headed `# <file>.py`."""
    out = []
    for info, body in fences(text):
        head, *lines = body.splitlines()
        if info.strip() == 'python' and re.fullmatch(r'# [\w/]+\.py', head.strip()):
            runs = [[]]
            for line in map(squash, lines):
                if line == '...':
                    runs.append([])
                elif line:
                    runs[-1].append(line)
            out.append((head.strip()[2:], [run for run in runs if run]))
    return out


def misquoted(text, repo=REPO):
    """-> [(file, the first line of a run that the file does not hold there)]: each run of quoted lines must be
    consecutive lines of the file (blank lines aside), the runs in the file's order."""
    bad = []
    for file, runs in quotes(text):
        path = repo / file
        source = [squash(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
        at = 0
        for run in runs:
            found = next((i for i in range(at, len(source) - len(run) + 1)
                          if source[i:i + len(run)] == run), None)
            if found is None:
                bad.append((file, run[0]))
            else:
                at = found + len(run)
    return bad


def demos(text):
    """-> [(the command, its output's lines, exact?)]: each ```sh block followed at once by a ```text block."""
    blocks = re.findall(r'^```sh\n(.*?)^```\n\n?^```text( exact)?\n(.*?)^```', text, re.M | re.S)
    return [(cmd, [squash(line) for line in out.splitlines() if line.strip()], bool(exact))
            for cmd, exact, out in blocks]


def pattern(line, exact):
    """An output line as a regex: its numbers stand for any number unless exact."""
    if exact:
        return re.escape(line)
    parts = re.split(f'({NUMBER})', line)
    return ''.join(NUMBER if i % 2 else re.escape(part) for i, part in enumerate(parts))


def unmatched(expected, printed, exact):
    """-> the first expected line that the printed lines do not hold in order (None: all are there)."""
    lines, at = [squash(line) for line in printed.splitlines()], 0
    for line in expected:
        if line == '...':
            continue
        found = next((i for i in range(at, len(lines)) if re.fullmatch(pattern(line, exact), lines[i])), None)
        if found is None:
            return line
        at = found + 1
    return None


def missing_names(text):
    """-> the backticked `Class.method` names that no class of the repository's scripts has."""
    sources = {p.name: p.read_text() for p in REPO.glob('*.py')}
    out = []
    for cls, name in re.findall(r'`([A-Z]\w*)\.([a-z_]\w*)`', text):
        if not any(re.search(rf'^class {cls}\b(.(?!^class ))*def {name}\(', src, re.M | re.S)
                   for src in sources.values()):
            out.append(f'{cls}.{name}')
    return out


def private_refs(text):
    """-> issue numbers and commit ids in what a reader sees (link targets aside: a heading's anchor may
    hold them)."""
    seen = re.sub(r'\]\([^)]*\)', ']', text)
    return re.findall(r'\bissues? #?\d+|#\d+\b|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b', seen, re.I)


# -----------------------------------------------------------------------------
def test_every_quote_is_in_its_file():
    found = quotes(GUIDE)
    assert len(found) >= 8 and {'model.py', 'train.py'} <= {file for file, _ in found}
    assert sum(len(run) for _, runs in found for run in runs) >= 40
    assert misquoted(GUIDE) == [], "GUIDE.md quotes lines that its file does not hold (there, in that order)"


def test_a_misquote_is_caught():
    block = lambda file, *lines: f"```python\n# {file}\n" + '\n'.join(lines) + '\n```\n'
    step = '    return z + self.alpha() * (self.block(z, cache, (segment, i)) - z)'
    alpha = 'def alpha(self):'
    assert misquoted(block('model.py', alpha, '...', step)) == []  # spacing aside, `...` between
    assert misquoted(block('model.py', 'z_new = z + alpha * (self.block(z) - z)')) == \
        [('model.py', 'z_new = z + alpha * (self.block(z) - z)')]  # not in the file
    assert misquoted(block('model.py', step, '...', alpha)) == [('model.py', alpha)]  # out of order
    assert misquoted(block('model.py', alpha, step)) == [('model.py', alpha)]  # not together
    assert misquoted(block('train.py', step)) == [('train.py', step.strip())]  # another file's
    assert misquoted(block('nope.py', alpha)) == [('nope.py', alpha)]


def test_the_guide_shows_commands_with_their_output():
    shown = demos(GUIDE)
    assert len(shown) >= 8 and sum(exact for *_, exact in shown) >= 3
    assert any('train.py' in cmd for cmd, *_ in shown)


def test_an_output_line_that_was_not_printed_is_caught():
    printed = "logit -2.1972 -> alpha 0.1000000\nnoise\nthe study's bug: alpha 0.525\n"
    assert unmatched(['logit -2.1972 -> alpha 0.1000000', '...', "the study's bug: alpha 0.525"],
                     printed, exact=True) is None
    assert unmatched(["the study's bug: alpha 0.525", 'logit -2.1972 -> alpha 0.1000000'],
                     printed, exact=True) == 'logit -2.1972 -> alpha 0.1000000'  # out of order
    assert unmatched(['logit -2.1972 -> alpha 0.1'], printed, exact=True) == 'logit -2.1972 -> alpha 0.1'
    assert unmatched(['logit -1.5 -> alpha 0.2'], printed, exact=False) is None  # numbers may differ
    assert unmatched(['logit -1.5 -> beta 0.2'], printed, exact=False) == 'logit -1.5 -> beta 0.2'
    log = 'iter 30: loss 3.1, depths k1:3.150 k2:3.149 k4:3.148, alpha 0.101, lr 3.00e-04, 95ms/iter, 10,812 tok/s'
    assert unmatched(['iter 1: loss 5.5483, depths k1:5.548 k2:5.548 k4:5.548, alpha 0.100, lr 1.43e-04, '
                      '471ms/iter, 2,174 tok/s'], log, exact=False) is None


def test_named_methods_exist():
    assert missing_names(GUIDE) == []
    assert missing_names('`Loop.per_token` `GPT.readout` `Loop.forward` `Nope.step`') == ['Loop.forward', 'Nope.step']


def test_no_issue_numbers_or_commit_ids():
    assert private_refs(GUIDE) == []
    assert private_refs('as issue 37 found at c2945b8 ([the rule](RESULTS.md#x-issue-37))') == ['issue 37', 'c2945b8']


@pytest.mark.slow
def test_every_command_in_a_block_parses():
    """The commands of the guide's ```sh blocks that it does not run (a whole training, the data), as typed:
    valid bash, and their arguments checked by the script's own configurator (NANOLOOP_ARGS_ONLY)."""
    lines = [line.strip() for info, body in fences(GUIDE) if info.strip() == 'sh' for line in body.splitlines()]
    cmds = [line for line in lines if line.startswith('python ') and script_and_args(line)]
    assert len(cmds) >= 5
    env = {**os.environ, 'NANOLOOP_ARGS_ONLY': '1', 'OMP_NUM_THREADS': '1', 'SHARED': str(REPO.parent / 'shared')}
    for cmd in cmds:
        assert subprocess.run(['bash', '-n', '-c', cmd]).returncode == 0, cmd
        script, args = script_and_args(cmd)
        r = finish(start(REPO, script, *args, env=env, stderr=subprocess.STDOUT))
        assert r.returncode == 0, f"{cmd}\n{r.stdout}"


@pytest.mark.slow
def test_the_commands_print_what_the_guide_shows(tmp_path):
    """Each command, in the page's order, in a copy of the repository's files (a fresh clone's, and the
    changes not yet committed)."""
    files = subprocess.run(['git', 'ls-files', '-co', '--exclude-standard'], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    for f in files:
        if (REPO / f).is_file():
            (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, tmp_path / f)
    env = {**os.environ, 'OMP_NUM_THREADS': '1',
           'PATH': os.path.dirname(sys.executable) + os.pathsep + os.environ['PATH']}
    for cmd, expected, exact in demos(GUIDE):
        cmd = re.sub(r'^(python train\.py .*)$', lambda m: m[1] + SHORT, cmd, flags=re.M)
        r = subprocess.run(['bash', '-c', cmd], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        assert r.returncode == 0, f"{cmd}\n{r.stdout}"
        line = unmatched(expected, r.stdout, exact)
        assert line is None, f"GUIDE.md shows {line!r}, which this did not print:\n{cmd}\n{r.stdout}"
