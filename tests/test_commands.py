"""Every command in README.md, GUIDE.md, RESULTS.md, ERRORS.md and the configs' comments runs as
typed in bash: its syntax (bash -n), and its arguments, parsed and checked by the script's own
configurator.py (NANOLOOP_ARGS_ONLY=1 stops right after that). README.md keeps nanoGPT's shape,
and every link between the pages resolves."""
import os, re, shlex, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from harness import finish, start

REPO = Path(__file__).resolve().parents[1]


AT = r'#\s*at ([0-9a-f]{7,40})\s*$'  # 'python ...   # at 6280d14': it runs as written at that commit


def commands(text):
    """`python ...` / `torchrun ...` in inline code and code blocks, split at &&, no comments; not
    those of an older commit (# at <commit>, below)."""
    spans = re.findall(r'`((?:python|torchrun) [^`]+)`', text)
    for block in re.findall(r'```(?:sh|bash)?\n(.*?)```', text, re.S):
        spans += [line for line in block.splitlines()
                  if line.startswith(('python ', 'torchrun ')) and not re.search(AT, line)]
    parts = [part for span in spans for part in re.split(r'&&|  then  ', span)]
    return [part.split(' #')[0].strip() for part in parts]


def script_and_args(cmd):
    """-> (script.py, its arguments) of a python or torchrun command; None for python -m ..."""
    words = shlex.split(cmd)
    i = next((i for i, w in enumerate(words) if w.endswith('.py')), None)
    return None if i is None else (words[i], tuple(words[i + 1:]))


PAGES = ['README.md', 'GUIDE.md', 'RESULTS.md', 'ERRORS.md']
DOCS = [*PAGES, *sorted(str(p.relative_to(REPO)) for p in REPO.glob('config/*.py'))]

def doc_commands(doc):
    text = (REPO / doc).read_text()
    if doc.endswith('.py'):  # a config shows its commands in comments: '# $ python ...'
        text = '```\n' + '\n'.join(re.findall(r'^# \$ (.*)$', text, re.M)) + '\n```'
    return commands(text)


ALL = sorted({(doc, cmd) for doc in DOCS for cmd in doc_commands(doc)})


def test_the_docs_have_commands():
    docs = {doc for doc, _ in ALL}
    assert len(ALL) >= 35 and {'README.md', 'GUIDE.md', 'config/smoke.py'} <= docs
    assert any(cmd.startswith('torchrun') for _, cmd in ALL)


@pytest.fixture(scope='module')
def parsed():
    """Each script + arguments, checked once, all at once (each in a process forked from harness.SERVER,
    which imported torch already: the import is most of such a run)."""
    env = {**os.environ, 'NANOLOOP_ARGS_ONLY': '1', 'OMP_NUM_THREADS': '1',  # README exports SHARED first
           'SHARED': str(REPO.parent / 'shared')}
    runs = sorted({p for _, cmd in ALL if (p := script_and_args(cmd))})

    def check(p):
        r = finish(start(REPO, p[0], *p[1], env=env, stderr=subprocess.STDOUT))
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


@pytest.mark.parametrize('doc', PAGES)
def test_a_command_of_an_older_commit_is_a_script_that_commit_has(doc):
    """A command whose code left is shown as it ran, with its commit: 'python frontier.py ...
    # at 6280d14' (frontier.py was at the root then). That commit must hold its script."""
    for line in re.findall(r'^\s*((?:python|torchrun) .*)$', (REPO / doc).read_text(), re.M):
        if (at := re.search(AT, line)):
            git = lambda *a: subprocess.run(['git', '-C', str(REPO), *a], capture_output=True)
            if git('cat-file', '-e', f'{at[1]}^{{commit}}').returncode:
                pytest.skip(f"{at[1]} is not in this clone's history")
            script = script_and_args(line.split(' #')[0])[0]
            assert git('cat-file', '-e', f'{at[1]}:{script}').returncode == 0, (doc, line)


def test_a_broken_command_is_caught():
    assert commands("see `python bench.py --phantom_ks=(1,4)` and `python -m pytest -q`") == \
        ['python bench.py --phantom_ks=(1,4)', 'python -m pytest -q']
    assert subprocess.run(['bash', '-n', '-c', 'python bench.py --phantom_ks=(1,4)'],
                          capture_output=True).returncode != 0


def test_readme_is_short():
    lines = (REPO / 'README.md').read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move detail to RESULTS.md"
    assert [i for i, line in enumerate(lines, 1) if len(line) > 100] == []


def test_no_line_of_code_is_over_100_characters():
    """The budget (DESIGN.md): no line over 100 characters in any .py of the repository, tests aside
    (the top-level scripts, config/, lab/ and its folders)."""
    paths = []  # (not in what .gitignore keeps out: data/, out*/, .venv/, ...)
    for root, dirs, files in os.walk(REPO):
        dirs[:] = sorted(d for d in dirs if d not in ('tests', 'data', 'gpu_check', '__pycache__')
                         and not d.startswith(('.', 'out')))
        paths += [Path(root) / f for f in sorted(files) if f.endswith('.py')]
    assert {'train.py', 'config', 'lab'} <= {p.relative_to(REPO).parts[0] for p in paths}
    long = [f"{p.relative_to(REPO)}:{i}" for p in paths
            for i, line in enumerate(p.read_text().splitlines(), 1) if len(line) > 100]
    assert long == []


def anchor(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r'[^\w\- ]', '', heading.strip().lower()).replace(' ', '-')


def broken_links(doc, text):
    """-> the relative links of a page whose file or #heading does not exist."""
    out = []
    for target in re.findall(r'\]\(([^)\s]+)\)', text):
        if re.match(r'\w+:', target):
            continue  # https://..., mailto:
        file, _, name = target.partition('#')
        path = REPO / (file or doc)
        if not path.exists():
            out.append(target)
        elif name:  # a heading of a page, code blocks aside ('# comment' lines are not headings)
            page = re.sub(r'```.*?```', '', path.read_text(), flags=re.S)
            if name not in map(anchor, re.findall(r'^#+ (.*)$', page, re.M)):
                out.append(target)
    return out


@pytest.mark.parametrize('doc', PAGES)
def test_links_resolve(doc):
    assert broken_links(doc, (REPO / doc).read_text()) == []


def test_a_broken_link_is_caught():
    text = ('[a](RESULTS.md#performance) [b](RESULTS.md#no-such) [c](NOPE.md) [d](#quick-start) '
            '[e](https://x.org)')
    assert broken_links('README.md', text) == ['RESULTS.md#no-such', 'NOPE.md']
