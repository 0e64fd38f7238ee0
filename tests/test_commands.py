"""Every command in README.md, GUIDE.md and the configs' comments runs as typed in bash: its syntax (bash -n), and its arguments,
parsed and checked by the script's own configurator.py (NANOLOOP_ARGS_ONLY=1 stops right after that)."""
import os, re, shlex, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def commands(text):
    """`python ...` / `torchrun ...` in inline code and in code blocks, split at &&, comments dropped."""
    spans = re.findall(r'`((?:python|torchrun) [^`]+)`', text)
    for block in re.findall(r'```(?:sh|bash)?\n(.*?)```', text, re.S):
        spans += [line for line in block.splitlines() if line.startswith(('python ', 'torchrun '))]
    parts = [part for span in spans for part in re.split(r'&&|  then  ', span)]
    return [part.split(' #')[0].strip() for part in parts]


def script_and_args(cmd):
    """-> (script.py, its arguments) of a python or torchrun command; None for python -m ..."""
    words = shlex.split(cmd)
    i = next((i for i, w in enumerate(words) if w.endswith('.py')), None)
    return None if i is None else (words[i], tuple(words[i + 1:]))


DOCS = ['README.md', 'GUIDE.md', *sorted(str(p.relative_to(REPO)) for p in REPO.glob('config/*.py'))]

def doc_commands(doc):
    text = (REPO / doc).read_text()
    if doc.endswith('.py'):  # a config shows its commands in comments: '# $ python ...'
        text = '```\n' + '\n'.join(re.findall(r'^# \$ (.*)$', text, re.M)) + '\n```'
    return commands(text)


ALL = sorted({(doc, cmd) for doc in DOCS for cmd in doc_commands(doc)})


def test_the_docs_have_commands():
    assert len(ALL) >= 35 and {'README.md', 'GUIDE.md', 'config/smoke.py'} <= {doc for doc, _ in ALL}
    assert any(cmd.startswith('torchrun') for _, cmd in ALL)


@pytest.fixture(scope='module')
def parsed():
    """Each distinct script + arguments, checked once, all at once (most of a run is torch's import)."""
    env = {**os.environ, 'NANOLOOP_ARGS_ONLY': '1', 'OMP_NUM_THREADS': '1'}
    runs = sorted({p for _, cmd in ALL if (p := script_and_args(cmd))})

    def check(p):  # 3 at a time: a burst of 40 processes starves the other tests' DDP runs
        r = subprocess.run([sys.executable, p[0], *p[1]], cwd=REPO, env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
        return r.returncode, r.stdout
    with ThreadPoolExecutor(3) as pool:
        return dict(zip(runs, pool.map(check, runs)))


@pytest.mark.parametrize('doc,cmd', ALL)
def test_command_runs_as_typed(doc, cmd, parsed):
    syntax = subprocess.run(['bash', '-n', '-c', cmd], capture_output=True, text=True)
    assert syntax.returncode == 0, f"{doc}: {cmd!r} is not valid bash: {syntax.stderr}"
    p = script_and_args(cmd)
    if p is not None:  # (python -m pytest -q has no script to check)
        rc, out = parsed[p]
        assert rc == 0, f"{doc}: {cmd!r}\n{out}"


def test_a_broken_command_is_caught():
    assert commands("see `python bench.py --phantom_ks=(1,4)` and `python -m pytest -q`") == \
        ['python bench.py --phantom_ks=(1,4)', 'python -m pytest -q']
    assert subprocess.run(['bash', '-n', '-c', 'python bench.py --phantom_ks=(1,4)'],
                          capture_output=True).returncode != 0
