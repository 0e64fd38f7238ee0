"""`python script.py args` without paying torch's import each time: most of a tiny run is that import
(~4 s of CPU for train.py, with model.py's), so a server imports it once and forks a process for each
run. The run is still a process of its own, started by the test: its own pid (signals reach it), exit
status, stdout and stderr (pipes), working directory and environment; in it the script runs as
`python script.py args` would run it: as __main__, with the same exit status, the same last words on
stderr (configurator.py's one-line errors), atexit handlers run at the end.

harness.py uses it: start(...) -> a Run, which answers as subprocess.Popen does. Plain subprocesses
remain where the process itself is what a test checks: torchrun and its workers, commands typed in
bash (a script's printed resume command, gpu_check.sh), and a bare `import prepare` (no side effects).
"""
import atexit, gc, json, os, runpy, select, signal, socket, subprocess, sys, threading, time
from contextlib import suppress

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------- the server (its own process)
def serve(sock):
    """Each request: (argv, cwd, env) and the fds of the run's stdout, stderr and status pipes. Every
    process it forks is waited for, so that its CPU time counts in the tests' (`time pytest`)."""
    gc.freeze()  # the garbage collector of a run leaves the server's objects (and their pages) alone
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C on pytest: its runs stop, as they would
    while True:
        request, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
        if not request:  # the tests ended: their end of the socket closed
            break
        if os.fork() == 0:
            sock.close()
            watch(json.loads(request), *fds)
        for fd in fds:
            os.close(fd)
        with suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:  # the watchers of the runs that ended
                pass
    with suppress(ChildProcessError):
        while True:
            os.wait()


def watch(request, out, err, status):
    """Fork the run, tell the test its pid, wait for it, tell its exit status (as Popen reports it)."""
    pid = os.fork()
    if pid == 0:
        os.close(status)
        execute(*request, out, err)
    os.close(out), os.close(err)
    os.write(status, f'{pid}\n'.encode())
    _, wait_status = os.waitpid(pid, 0)
    os.write(status, f'{os.waitstatus_to_exitcode(wait_status)}\n'.encode())
    os._exit(0)


def execute(argv, cwd, env, out, err):
    """Run `python *argv` (a script and its arguments, or -c code and its arguments) here, and end as
    python ends: SystemExit's status (a message printed), the excepthook for an exception
    (configurator.py's: one line for bad input), KeyboardInterrupt by SIGINT, atexit handlers; then
    os._exit, not the interpreter's teardown, which would touch, and so copy, every page shared with
    the server (seconds of CPU)."""
    os.dup2(out, 1), os.dup2(err, 2), os.close(out), os.close(err)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # python's own: KeyboardInterrupt
    signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as from a terminal, even if the suite ran nohup
    status, by_signal = 0, None
    try:
        if argv[0] == '-c':
            sys.argv, sys.path[0] = ['-c', *argv[2:]], ''
            exec(compile(argv[1], '<string>', 'exec'), {'__name__': '__main__'})
        else:
            sys.argv, sys.path[0] = argv, os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name='__main__')
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        if status == 1 and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException as e:
        sys.excepthook(type(e), e, e.__traceback__)
        status, by_signal = 1, signal.SIGINT if isinstance(e, KeyboardInterrupt) else None
    atexit._run_exitfuncs()
    sys.stdout.flush(), sys.stderr.flush()
    if by_signal:
        signal.signal(by_signal, signal.SIG_DFL)
        os.kill(os.getpid(), by_signal)
    os._exit(status & 0xff)


# ---------------------------------------------------------------- the tests' side
class Run:
    """What subprocess.Popen(text=True, stdout=PIPE, stderr=PIPE) gives of a run the server forked."""
    def __init__(self, args, stdout, stderr, status):
        self.args, self.returncode, self._status = args, None, status
        self.stdout, self.stderr = (os.fdopen(fd) if fd is not None else None for fd in (stdout, stderr))
        self._got = {f: b'' for f in (self.stdout, self.stderr) if f}
        self.pid = int(self._line(None))

    def _line(self, timeout):  # the next line of the status pipe, or None if none came in time
        if not select.select([self._status], [], [], timeout)[0]:
            return None
        line = b''
        while not line.endswith(b'\n'):
            byte = os.read(self._status, 1)
            if not byte:
                raise RuntimeError(f'the fork server ended before {self.args} did: see its stderr')
            line += byte
        return line

    def poll(self):
        return self.wait(0) if self.returncode is None else self.returncode

    def wait(self, timeout=None):
        if self.returncode is None:
            line = self._line(timeout)
            if line is None:
                if timeout == 0:
                    return None
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = int(line)
            os.close(self._status)
        return self.returncode

    def send_signal(self, sig):
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout=None):
        """-> (stdout, stderr), read to their end; a timeout keeps what came, for the next call."""
        end = time.monotonic() + (1e9 if timeout is None else timeout)
        while any(not f.closed for f in self._got):
            reading = [f for f in self._got if not f.closed]
            ready = select.select(reading, [], [], max(0, end - time.monotonic()))[0]
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout)
            for f in ready:
                data = os.read(f.fileno(), 1 << 16)
                self._got[f] += data
                if not data:
                    f.close()
        self.wait(max(0, end - time.monotonic()))
        return tuple(self._got[f].decode() if f else None for f in (self.stdout, self.stderr))


class Server:
    """The server process, started on the first run asked of it; runs may be asked from any thread."""
    def __init__(self, preload):
        self.preload, self.sock, self.process, self.lock = preload, None, None, threading.Lock()
        atexit.register(self.close)

    def close(self):
        """Ends the server, once its runs ended; waited for, so that its CPU time counts in ours."""
        if self.sock:
            self.sock.close()
            self.process.wait()

    def start(self, argv, cwd, env, stderr=subprocess.PIPE, stdout=subprocess.PIPE):
        """argv: [script.py, *args] or ['-c', code, *args]; stdout: PIPE or a file; stderr: PIPE,
        STDOUT or a file -> a Run."""
        pipes, send = {}, []
        for name, where in (('out', stdout), ('err', stderr)):
            if where == subprocess.PIPE:
                pipes[name], w = os.pipe()
            elif where == subprocess.STDOUT:
                w = os.dup(send[0])
            else:
                w = os.dup(where.fileno())
            send.append(w)
        status, status_w = os.pipe()
        with self.lock:
            if self.sock is None:
                self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                code = (f'import forkserver, socket; {self.preload}; '
                        f'forkserver.serve(socket.socket(fileno={theirs.fileno()}))')
                path = os.pathsep.join([REPO, os.path.dirname(os.path.abspath(__file__))])
                own = {**os.environ, 'PYTHONPATH': path, 'OMP_NUM_THREADS': '1', 'PYTHONUNBUFFERED': '1'}
                self.process = subprocess.Popen([sys.executable, '-c', code], cwd=REPO, env=own,
                                                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
                theirs.close()
            request = json.dumps([[str(a) for a in argv], str(cwd), dict(env)]).encode()
            socket.send_fds(self.sock, [request], [*send, status_w])
        for fd in (*send, status_w):
            os.close(fd)
        return Run(argv, pipes.get('out'), pipes.get('err'), status)
