"""forkserver.py: a run forked from the server answers as `python` does (the harness of the tests that run the
scripts stands on it). Each small program runs both ways, in a server of its own that preloads nothing."""
import os, signal, subprocess, sys

import pytest

from forkserver import Server

PROGRAMS = {  # name: (python -c program, what its last line of stderr must be); the first starts the server
    'cwd_env': ("import os; print(os.getcwd(), os.environ['NANOLOOP_X'], 'NANOLOOP_Y' in os.environ)", None),
    'prints': ("import sys; print('out', sys.argv[1:]); print('err', file=sys.stderr)", 'err'),
    'exit_3': ('raise SystemExit(3)', None),
    'exit_message': ("raise SystemExit('error: bad input')", 'error: bad input'),
    'exception': ("raise ValueError('x')", 'ValueError: x'),
    'ctrl_c': ('raise KeyboardInterrupt', 'KeyboardInterrupt'),
    'excepthook': ("import sys; sys.excepthook = lambda *e: print('one line', file=sys.stderr); 1 / 0",
                   'one line'),
    'atexit': ("import atexit; atexit.register(print, 'bye'); print('hi')", None),
}


@pytest.fixture(scope='module')
def server():
    server = Server('import json')
    yield server
    server.close()


@pytest.mark.parametrize('name', PROGRAMS)
def test_a_forked_run_answers_as_python_does(name, server, tmp_path):
    """Its exit status, stdout and last word on stderr; its own working directory and environment (the
    request's, the first run too: not the server's)."""
    code, last = PROGRAMS[name]
    env = {**os.environ, 'NANOLOOP_X': 'x'}
    env.pop('NANOLOOP_Y', None)
    os.environ['NANOLOOP_Y'] = 'the tests\' own, not the run\'s'
    try:
        forked = server.start(['-c', code, 'a', 'b'], tmp_path, env)
        out, err = forked.communicate(timeout=60)
    finally:
        del os.environ['NANOLOOP_Y']
    python = subprocess.run([sys.executable, '-c', code, 'a', 'b'], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=60)
    assert (forked.returncode, out) == (python.returncode, python.stdout), (err, python.stderr)
    assert err.splitlines()[-1:] == python.stderr.splitlines()[-1:] == ([last] if last else [])


def test_signals_reach_the_run_and_its_output_streams(server, tmp_path):
    p = server.start(['-c', "import time; print('ready', flush=True); time.sleep(600)"], tmp_path, os.environ)
    assert p.stdout.readline() == 'ready\n' and p.poll() is None
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == -signal.SIGTERM


def test_stdout_to_a_file_and_stderr_with_it(server, tmp_path):
    with open(tmp_path / 'log', 'w') as f:
        p = server.start(['-c', "import sys; print('a', flush=True); print('b', file=sys.stderr)"], tmp_path,
                         os.environ, stdout=f, stderr=subprocess.STDOUT)
        assert p.communicate(timeout=60) == (None, None) and p.returncode == 0
    assert (tmp_path / 'log').read_text() == 'a\nb\n'
