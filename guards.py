"""The seatbelts: what guards a run and teaches nothing about looped models (skip it at first).
Bad input is an InputError that names the problem and the fix, printed as one line, 'error: ...'."""
import os, re, ast, sys, glob, json, math, time, fcntl, shlex, atexit, signal, traceback
from contextlib import contextmanager, suppress
from difflib import get_close_matches

script_keys = {}  # the running script's keys and defaults (configurator.py sets them)
DTYPES = ("x in ('', 'float32', 'bfloat16')  # empty (the default), float32 or bfloat16; no "
          "float16 (its gradients would need a loss scaler)")  # every script's --dtype
PATHS = ('path', 'paths', 'folder', 'new file', 'new folder')  # the domains not a rule on x
# a rule that reads as Python says itself in words after '  # ' (an error message shows the words)
NAME = "'/' not in x and x not in ('.', '..')  # the name of a folder in data/, not a path"
COUNTS = 'all(type(k) is int and k >= 1 for k in x)  # a tuple of whole numbers, each at least 1'
NANOGPT = {  # nanoGPT's settings that nanoloop lacks: what stands for each (else the closest key)
    'n_layer': "the depth is n_prelude + sum(loops) + n_coda, e.g. --n_prelude=2 '--loops=(30,)'",
    'init_from': "sample.py and eval.py read --out_dir's checkpoint, e.g. --out_dir=out-smoke",
    'gpt2': "no GPT-2 weights: --init_from is scratch, resume or a run's out_dir",
    **dict.fromkeys(['wandb_log', 'wandb_project', 'wandb_run_name'], "no wandb: the run's log is "
                    "what train.py prints; keep it in a file with python train.py ... | tee log")}
SEEDS = ('len(x) >= 1 and len(set(x)) == len(x) and all(type(s) is int for s in x)'
         '  # a tuple of whole numbers, each once')
RUN_ONLY = ['init_from', 'out_dir', 'device', 'backend', 'compile', 'eval_only', 'overwrite']

# the model's keys (GPTConfig's fields): each one's valid values (x: its value), the rules across
# them in words; train.py checks them before GPTConfig checks its own
MODEL_KEYS = {'block_size vocab_size n_embd n_head phantom_steps': 'x >= 1',
              'n_prelude n_coda': 'x >= 0', 'alpha_init': '0 < x < 1', 'dropout': '0 <= x < 1',
              'loops supervise': COUNTS,
              'halt_penalty exit_beta': 'x >= 0', 'phantom act exit_gate bias': 'any'}
MODEL_RULES = [
    ('n_embd % n_head == 0', "n_embd must be a multiple of n_head: change one of them"),
    ('all(d <= sum(loops) for d in supervise)',
     "a supervised depth is past the last iteration (the sum of loops): lower --supervise or "
     "raise --loops"),
    ('list(supervise) == sorted(set(supervise))',
     "supervise lists each depth once, in increasing order, e.g. --supervise=(1,2,4)"),
    ('not (act and phantom)', "act picks each token's depth, phantom a fixed one: drop one"),
    ('not (act and supervise)', "act picks each token's depth: drop --supervise with --act"),
    ('not exit_gate or len(loops) == 1 and any(d < sum(loops) for d in supervise)',
     "exit_gate needs one tied segment and a supervised depth before its last, e.g. "
     "--loops=(12,) --supervise=(1,2,4,8)")]

TRAIN_RULES = [
    ('not decay_lr or lr_decay_iters > warmup_iters',
     "the learning rate decays after its warmup: raise --lr_decay_iters past --warmup_iters"),
    ('not decay_lr or min_lr <= learning_rate',
     "min_lr is where the learning rate decays to: give a --min_lr below --learning_rate"),
    ('exit_gate or gate_detached[0] >= gate_detached[1]',
     "gate_detached does nothing without exit_gate: add --exit_gate=True, or drop it"),
    ('not phantom or phantom_steps <= min(loops)',
     "phantom backprops through the last phantom_steps of each segment: give at most the "
     "fewest --loops"),
    # a key set (changed from its default) that acts only with another says so
    *[(f"'{key}' not in changed or {on}", f"does nothing without {on}: add --{on}=True, or drop "
       f"--{key}") for on, key in (('phantom', 'phantom_steps'), ('act', 'halt_penalty'),
                                   ('exit_gate', 'exit_beta'))]]

# Each script's keys: {script: (each key's valid values, the rules across keys in words)}. x is
# the key's value; configurator.py checks them before any work (tests/test_input.py tests them all)
KEYS = {
    'train.py': (
        {**MODEL_KEYS, 'out_dir': 'new folder', 'init_from': 'path',
         'dataset': f"x != '' and {NAME}",
         'eval_interval log_interval eval_iters gradient_accumulation_steps batch_size': 'x >= 1',
         'max_iters warmup_iters lr_decay_iters min_lr weight_decay grad_clip': 'x >= 0',
         'learning_rate': 'x > 0',
         'beta1 beta2': '0 <= x < 1', 'seed': '0 <= x < 2**64',
         'gate_detached': 'len(x) == 2 and all(type(i) is int and i >= 0 for i in x)'
                          '  # two whole numbers, each at least 0',
         'dtype': DTYPES, 'backend': "x in ('', 'nccl', 'gloo')",
         'eval_only always_save_checkpoint sft_pad decay_lr compile overwrite device': 'any'},
        MODEL_RULES + TRAIN_RULES),
    'sample.py': (
        {'max_new_tokens num_samples': 'x >= 1', 'temperature top_k': 'x >= 0',
         'top_p': '0 < x <= 1', 'seed': '0 <= x < 2**64',
         'repetition_penalty': '0.01 <= x <= 100',  # (beyond: float32 logits overflow)
         'n_loops': 'x is None or type(x) is int and x >= 1'
                    ' or type(x) is tuple and all(type(k) is int and k >= 1 for k in x)'
                    '  # None, a whole number at least 1, or a tuple of them (one a segment)',
         'out_dir': 'paths', 'dtype': DTYPES, 'start exit_at show_depth device': 'any'},
        []),
    'eval.py': (
        {'batch_size eval_iters max_docs': 'x >= 1',
         'thresholds': 'all(type(t) in (int, float) and t >= 0 for t in x)'
                       '  # a tuple of numbers, each at least 0',
         'exit_kind': "x in ('', 'maxprob', 'resid')",
         'out_dir': 'paths', 'html': 'new file', 'dataset': NAME, 'dtype': DTYPES,
         'device': 'any'},
        [("exit_kind == 'resid' or all(t <= 1 for t in thresholds)",
          "a maxprob threshold is a probability: give --thresholds at most 1")]),
    'prepare.py': (
        {'dataset': "x in ('topics', 'shakespeare', 'fineweb', 'sft')",
         'tokenizer': "x in ('gpt2', 'byte')", 'eval_docs shards': 'x >= 1',
         'block_size': 'x >= 2', 'base_url hf_url': "x.startswith(('http://', 'https://'))"
                                                  "  # a URL, http:// or https://",
         'mirror': 'folder', 'data_root': 'new folder', 'seed': 'any'},
        [("dataset != 'fineweb' or tokenizer == 'gpt2'",
          "fineweb's shards are GPT-2 tokens: use --tokenizer=gpt2")]),
    'bench.py': (
        {'batch_size block_size n_embd n_head k repeats': 'x >= 1', 'gen_tokens': 'x >= 2',
         'n_prelude n_coda': 'x >= 0', 'vocab_size': 'x >= 257', 'peak_flops': 'x >= 0',
         'phantom_ks gen_loops dtype_widths': COUNTS,
         'init_from': 'paths', 'prompt': "x != ''", 'dtype': DTYPES,
         'exit_at estimate device compile seed': 'any'},
        [('all(w % n_head == 0 for w in dtype_widths)',
          "each of dtype_widths must be a multiple of n_head"),
         ('n_embd % n_head == 0', "n_embd must be a multiple of n_head: change one of them")]),
    'frontier.py': (
        {'eval_iters batch_size jobs': 'x >= 1', 'results runs': 'new folder',
         'seeds': SEEDS, 'models train_args from_runs device': 'any'},
        []),
    'room.py': ({'n_rows train_rows train_seed batch_size': 'x >= 1', 'results': 'new folder',
                 'runs data': 'path', 'seeds': SEEDS, 'models': 'any'}, []),
}

GIVEN = {}  # the keys a config file or the command line set, and where (configurator.py)

class InputError(ValueError):
    """Bad input, raised on purpose. Any other exception is a bug, and keeps its traceback."""

def excepthook(kind, err, tb, _default=sys.excepthook):  # every script's one entry handler
    if issubclass(kind, BrokenPipeError):  # stdout closed (| head): end quietly, as head expects
        return os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # (the exit's flush goes nowhere)
    if issubclass(kind, KeyboardInterrupt):  # Ctrl-C: one line; python then exits as SIGINT (130)
        return print("stopped (Ctrl-C)", file=sys.stderr)
    where = os.path.basename(traceback.extract_tb(tb)[-1].filename) if tb else ''
    if kind.__name__ == 'OutOfMemoryError' or "can't allocate memory" in str(err):
        err = "out of memory: " + ('lower --batch_size' if 'batch_size' in script_keys
                                   else 'use a smaller model')
    elif issubclass(kind, OSError) and err.filename is not None:  # a file the OS refused
        err = f"cannot use {err.filename}: {err.strerror}" + (  # (Printed names stdout)
            ": send it where it can be written (> FILE)" * (err.filename == 'stdout'))
    elif os.environ.get('WORLD_SIZE', '1') != '1' and issubclass(kind, RuntimeError) and re.search(
            'gloo|nccl|by peer|Broken pipe|timed out', str(err), re.I):  # DDP: a process is gone
        why = str(err).split('] ')[-1].split('. ')[0]  # (the transport's own words)
        return print(f"error: another process of this DDP run ended ({why}): this one stops too; "
                     "nothing was saved since the last checkpoint: resume every process with "
                     "--init_from=resume", file=sys.stderr)  # (every survivor says so)
    elif not (issubclass(kind, InputError)  # (or a ValueError of model.py or decode.py: bad input)
              or kind is ValueError and where in ('model.py', 'decode.py')):
        return _default(kind, err, tb)
    if os.environ.get('RANK', '0') == '0':  # (torchrun: every rank meets the same input)
        print(f"error: {err}", file=sys.stderr)

def typed(key, value):  # key=value as typed in bash: --top_p=1.5, --out_dir='', '--loops=(2, 0)'
    return (f"--{key}={shlex.quote(value)}" if type(value) is str
            else shlex.quote(f"--{key}={value}"))

def check_arg(arg):  # configurator.py: one argument, before it is read
    if re.search('[\udc80-\udcff]', arg):  # how Python reads argv bytes that are not UTF-8
        raise InputError(f"{arg.partition('=')[0]} holds bytes that are not UTF-8 text: type it "
                         "again, or read it from a UTF-8 file (sample.py: --start=FILE:prompt.txt)")
    if arg.startswith('--') != ('=' in arg) and not os.path.exists(arg):  # --key, key=value
        raise InputError(f"'{arg}' is neither --key=value nor a config file: write "
                         f"--{arg.lstrip('-')}{'=VALUE' * ('=' not in arg)}")

def check_set(key, value, keys, where=''):  # configurator.py: a key the script has, of its type
    dash, default = '' if where else '--', keys.get(key)  # (where: the config file that sets it)
    if key not in keys:  # (nanoGPT's: what stands for it here)
        hint = f": nanoloop has no {key}: {NANOGPT[key]}" if key in NANOGPT else ''.join(
            f"; did you mean {dash}{k}?" for k in get_close_matches(key, keys, n=1))
        raise InputError(f"unknown config key {dash}{key}{where}{hint}")
    if default is not None and type(value) is not type(default):  # (None: any type)
        raise InputError(f"{typed(key, value)}{where}: {key} is of type "
                         f"{type(default).__name__}, e.g. {typed(key, default)}")

def run_config(path, into):  # configurator.py: a config file (Python, as nanoGPT's) -> settings
    text = read_text_file(path, 'config file', ' (see config/ for the available ones)')
    if not path.endswith('.py'):  # (a JSON file is Python too, that sets nothing)
        raise InputError(f"config file {path} is not a .py file: a config file is Python that sets "
                         "keys, e.g. batch_size = 32 (see config/)")
    into.setdefault('include', lambda name: run_config(os.path.join(os.path.dirname(path), name),
                                                       into))  # include('v5.py'): its settings
    try:
        exec(compile(text, path, 'exec'), into)
    except (Exception, SystemExit) as e:  # the config file's own error: name the file and its line
        if isinstance(e, InputError):  # (an include()'s: it names its own file)
            raise
        lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == path]
        line = e.lineno if isinstance(e, SyntaxError) else (lines or ['?'])[-1]
        why = ("calls sys.exit: a config file only sets keys" if isinstance(e, SystemExit)
               else f"{type(e).__name__}: {e}")
        raise InputError(f"config file '{path}', line {line}: {why}") from None
    imported = {a.asname or a.name.split('.')[0] for node in ast.walk(ast.parse(text))
                if isinstance(node, (ast.Import, ast.ImportFrom)) for a in node.names}
    return {k: v for k, v in into.items() if k in script_keys or k.islower() and k[0] != '_'
            and k not in imported and type(v) in (int, float, bool, str, tuple)}  # (a setting:
    # a script's key, or what looks like one: an unknown one is refused with its closest key)

def holds(rule, values):
    try:  # (a value of the wrong kind, a text among numbers, breaks the rule too)
        return eval(rule, dict(values))
    except Exception:
        return False

def domains(table):  # {'a b': 'x >= 1'} -> {'a': 'x >= 1', 'b': 'x >= 1'}
    return {key: domain for keys, domain in table.items() for key in keys.split()}

def check_keys(table, rules, values, defaults):  # configurator.py: each key, then the rules
    table = domains(table)  # (a key without one is a bug of the script: a KeyError, below)
    for key, default in defaults.items():  # against its domain (a path: ~ and $VAR expanded)
        value, domain = values[key], table[key]
        if lacks := need(key, value, domain):
            raise InputError(f"{typed(key, value)}: need {lacks}"
                             + f", e.g. {typed(key, default)}" * ('|x|' not in lacks))
        if domain in PATHS and value != default:
            values[key] = check_path(key, value, domain, default)
    if values.get('init_from', '') in ('', 'scratch'):  # (else train.py checks the run's settings)
        check_rules(rules, values, defaults)

def need(key, value, domain):  # -> what a key's value needs and lacks (in words), or ''
    floats = [v for v in (value if type(value) is tuple else [value]) if type(v) is float]
    if not all(abs(v) < 3e38 for v in floats):  # (1e999 reads as inf; nan passes no bound)
        return "a number of float32 range, |x| < 3e38"
    if domain not in (*PATHS, 'any') and not holds(domain, {'x': value}):
        rule, _, words = domain.partition('  # ')  # (words: the rule's, else the rule)
        return words or re.sub(r'\bx\b', key, rule)
    return ''

def check_rules(rules, values, defaults, kept=()):  # the first rule across keys that values break
    values = {**values, 'changed': set(GIVEN)}  # (changed: the keys this command sets)
    for rule, words in rules:  # (said in words, each key with where its value came from)
        if not holds(rule, values):
            keys = [k for k in dict.fromkeys(re.findall(r'[a-z_]+', rule)) if k in defaults]
            raise InputError(f"{', '.join(said(k, values[k], kept) for k in keys)}: {words}")

def check_path(key, value, kind, default):  # -> the path (paths: a,b), ~ and $VAR expanded
    names = folders(value) if kind == 'paths' else [value]
    if '' in names:  # '' is a path only where it is the default (off)
        raise InputError(f"{typed(key, value)}: an empty name: need {key} != '', e.g. "
                         f"{typed(key, default)}")
    paths = [os.path.expanduser(os.path.expandvars(name)) for name in names]
    for path in paths:  # what is left is what bash would have expanded, or a typo
        if odd := re.search(r'\$\{?\w+|^~\w*|[\x00-\x1f]|^\s|\s$', path):
            raise InputError(f"{typed(key, value)}: {odd[0]!r} is left as typed: an unset $VAR, a "
                             "~user without a home, a space at an end or a control character")
        if kind in ('new folder', 'new file'):  # an output: created, to see, before any work
            check_output(path, key, kind == 'new folder')
        if kind == 'folder' and not os.path.isdir(path):  # a folder read: it must be there
            raise InputError(f"{typed(key, value)}: {'not a' * os.path.exists(path) or 'no such'} "
                             f"folder (in {os.getcwd()}): give a folder that is there")
    return ','.join(paths)

def check_output(path, key, folder=False, fix=''):  # before any work: make what path will be,
    real, through = (path, False) if folder else target(path)  # remove it (what the OS will
    probe = f"{os.path.join(real, 'probe') if folder else real}.{os.getpid()}.tmp"  # refuse, now)
    where = inner = os.path.normpath(os.path.dirname(probe) or '.')  # (probe: its writer's name)
    while where and not os.path.lexists(where):  # where: the first folder there
        where = os.path.dirname(where)
    try:  # a file where a folder belongs, a read-only disk, a name too long, ...: the OS says
        if os.path.isdir(real) and not folder:  # (a file's rename onto a folder would fail)
            raise IsADirectoryError(21, 'Is a directory', path)
        os.makedirs(os.path.dirname(probe) or '.', exist_ok=True)
        if not through:  # (a device or a FIFO is written through: nothing to make)
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT))
            os.remove(probe)
    except OSError as e:
        raise refused(path, e, fix or f"give another --{key}") from None
    finally:  # nothing is left of the folders it made (one that another run has put a file in
        while inner != where:  # stays)
            with suppress(OSError):
                os.rmdir(inner)
            inner = os.path.dirname(inner)

def target(path):  # -> where a write of path lands (a link: its target; the link stays), and
    real = os.path.realpath(path) if os.path.islink(path) else path  # whether it is written
    return real, os.path.exists(real) and not os.path.isfile(real) and not os.path.isdir(real)
    # through: a device or a FIFO (/dev/null, a named pipe) is written in place, never replaced

def folders(value):  # --out_dir='a,b' -> ['a', 'b'] (a folder named a,b: whole)
    return [value] if os.path.isdir(value) else value.split(',')

def refused(path, e, fix):  # the OS refused to write path (any errno) -> one line: why, the fix
    where = f" ({e.filename})" if e.filename not in (None, path) else ''
    return InputError(f"cannot write {path}: {e.strerror}{where}: {fix}")

def read_text_file(path, what, hint=''):  # -> the UTF-8 text of a file the user named (a pipe too)
    try:
        return open(path, encoding='utf-8-sig').read()  # (a BOM, as Notepad writes, is no text)
    except (OSError, UnicodeDecodeError) as e:  # (not found, a folder, not UTF-8: one line)
        why = e.strerror if isinstance(e, OSError) else f"not UTF-8 text ({e}): save it as UTF-8"
        raise InputError(f"{what} {path}: {why}{hint}") from None

def read_prompt(start):  # sample.py's --start: the text, or FILE:path's (~ and $VAR expanded)
    if start.startswith('FILE:'):
        path = os.path.expanduser(os.path.expandvars(start[5:]))  # (bash leaves ~ after '=')
        start = read_text_file(path, 'prompt file', ' (--start=FILE:path reads path)')
    if not start:
        raise InputError("the prompt is empty: give some text, e.g. --start=FILE:prompt.txt")
    return start

def get_device(device=''):  # -> the --device ('' = cuda if there is a GPU, else cpu), checked
    import torch
    device = device or ('cuda' if torch.cuda.is_available() else 'cpu')
    if device == 'cuda' and 'LOCAL_RANK' in os.environ:  # torchrun: each rank its own GPU, so
        device = f"cuda:{os.environ['LOCAL_RANK']}"  # that no rank opens a context on GPU 0
    try:
        torch.empty(1, device=device).cpu()  # (a device that holds no data, meta, fails here)
    except Exception:
        raise InputError(f"--device={device} is not usable on this machine: use --device=cpu")
    return device

def load_checkpoint(path, build, device='cpu', key='out_dir'):  # -> (build(ckpt), ckpt)
    import torch  # (build: GPT.from_checkpoint; key: the option that named the folder)
    if not os.path.exists(path):  # a typo? name the out_dir whose ckpt.pt is closest, or the newest
        found = sorted(glob.glob('*/ckpt.pt'), key=os.path.getmtime, reverse=True)
        near = get_close_matches(path, found, n=1, cutoff=0.8) or found[:1]
        shown = list(dict.fromkeys(near + found[:4]))  # (the closest and the newest: 5 at most)
        more = f" and {len(found) - len(shown)} more" * (len(found) > len(shown))
        hint = (f"; found {', '.join(shown)}{more}: add --{key}={os.path.dirname(near[0])}" if found
                else f": train one first, or set --{key}")
        hint = f": nanoloop has {NANOGPT['gpt2']}" if path.startswith('gpt2') else hint
        raise InputError(f"no checkpoint at {path}{hint}")
    try:  # weights_only: a checkpoint is tensors and plain data, never code (which unpickling runs)
        if not os.path.isfile(path):  # (a folder; a FIFO would hang the read)
            raise ValueError("not a regular file")
        ckpt = torch.load(path, map_location=device, weights_only=True)
        check_saved(path, {**ckpt['config'], **ckpt['model_args']})
        model = build(ckpt)  # (another version's: a TypeError, KeyError or RuntimeError)
        ckpt['meta']['tokenizer'], ckpt['config']['dataset']  # (the scripts read them too)
    except InputError:
        raise
    except Exception as e:  # not a checkpoint, cut short, unsafe, another version's: one line
        why = ('unsafe: it holds objects other than tensors and plain data' if 'Unsupported global'
               in str(e) else f"{type(e).__name__}: {' '.join(str(e).split())[:200]}")
        raise InputError(f"{path} is not a checkpoint of this version of nanoloop ({why}): give "
                         f"the --{key} of a run train.py saved") from None
    fresh, weights = digest(ckpt['model']), ckpt['model'].values()  # damaged in place? (train.py
    if ckpt.get('digest', fresh) != fresh or not all(  # saves a checksum beside the weights)
            t.isfinite().all() for t in weights if t.is_floating_point()):
        raise InputError(f"{path} is damaged: its weights differ from the checksum saved with them "
                         "or are not finite: use a copy of it, or train it again")
    return model.to(device), ckpt

def check_saved(path, saved):  # a checkpoint's settings are input too: each in train.py's domain
    table, keys = domains(KEYS['train.py'][0]), script_keys  # (and of the type this script's
    for key, value in saved.items():  # key of that name has)
        kind = type(value if keys.get(key) is None else keys[key])
        if lacks := need(key, value, table.get(key, 'any')) or (
                type(value) is not kind and f"a value of type {kind.__name__}"):
            raise InputError(f"{path} holds {key} = {value!r}; train.py saves {lacks}: the "
                             "checkpoint was edited or damaged: use another, or train it again")

def parse_exit(s, config=None, model='the model'):  # 'maxprob:0.9' -> ('maxprob', 0.9)
    kind, _, text = s.partition(':')
    t = -1.0  # a threshold >= 0, as eval.py's: resid:-1 or nan would never exit, without a word
    with suppress(ValueError):
        t = float(text) if kind in ('maxprob', 'resid') else t
    if not (0 <= t <= 1 or kind == 'resid' and t >= 0):  # (maxprob:1.5 would never exit)
        raise InputError(f"--exit_at={s}: write maxprob:T (0 <= T <= 1) or resid:T (T >= 0), "
                         "e.g. --exit_at=maxprob:0.9")
    check_exits(f"--exit_at={s}", config, model)  # (with a config: one that model has)
    return kind, t

def check_exits(given, c, model='the model'):  # an exit option (given) for a model (c: its config)
    if c and not c.exit_kinds():  # (post-hoc exits need a tied loop, and no ACT gate that picks)
        lacks = "an ACT gate that picks each token's depth" if c.act else "no tied loop"
        raise InputError(f"{given}: {model} has {lacks}; drop it")

def check_start(ckpt, meta, data_dir, T):  # a trained model (ckpt) against the data it meets
    c, data = ckpt['model_args'], f"tokenizer {meta['tokenizer']}, vocab_size {meta['vocab_size']}"
    if (trained := f"tokenizer {ckpt['meta']['tokenizer']}, vocab_size {c['vocab_size']}") != data:
        raise InputError(f"{data_dir}/meta.json: {data}, but the model was trained on --dataset="
                         f"{ckpt['config']['dataset']} ({trained}): prepare the data with the "
                         "model's tokenizer")
    if T > c['block_size']:  # (SFT rows set it: a row is block_size + 1 tokens)
        which = f"{data_dir}'s rows" if meta['row'] else said('block_size', T)
        raise InputError(f"{which}: {T} positions, more than the model's {c['block_size']}: "
                         "lower --block_size (SFT: prepare the rows with a lower --block_size)")

def check_blocks(path, n, T):  # a token stream (path) of n tokens, cut into rows of T + 1
    if n <= T:
        raise InputError(f"{path} has {n:,} tokens, too few for block_size {T}: lower --block_size,"
                         " or prepare more data")

def check_eval(model, ckpt, meta, n_val, data_dir, T, out_dir, html, exit_kind, thresholds,
               batch_size, device):  # eval.py: one model's settings against it, its data, memory
    given = f"--exit_kind={exit_kind}" if exit_kind else typed('thresholds', thresholds)
    check_exits(given, (exit_kind or thresholds) and model.config, f"the model in {out_dir}")
    check_start(ckpt, meta, data_dir, T)
    check_blocks(f"{data_dir}/val.bin", n_val, T)
    check_memory(ckpt['model_args'], batch_size, False, device)
    if html:  # (several out_dirs: a map in each, by this name)
        check_output(html, 'html')

def resume_command():  # this very command, resuming: it runs as typed
    args = [a for a in sys.argv if not a.startswith(('--init_from=', '--overwrite='))]
    return shlex.join(['python', *args, '--init_from=resume'])

def said(key, value, kept=()):  # key = value as this command set it, or where it came from
    if key in GIVEN:  # (a config file: 'key = value (in FILE)'; the command line: as typed)
        return f"{key} = {value!r}{GIVEN[key]}" if GIVEN[key] else typed(key, value)
    return f"{key} = {value!r} ({'the run' if key in kept else 'the default'})"

def check_kept(given, run, config, fixed):  # a given key the run fixes must agree with it
    doing, where = (('resuming', config['out_dir']) if config['init_from'] == 'resume'
                    else ('fine-tuning', config['init_from']))
    for key in sorted(k for k in given & set(run) & fixed if config[k] != run[k]):
        raise InputError(f"{said(key, config[key])}: the run in {where} has {typed(key, run[key])}"
                         f", which {doing} cannot change: drop it, or train a new --out_dir")

def check_run(config, defaults, kept):  # train.py's settings, merged with a run's (kept)
    check_rules(KEYS['train.py'][1], config, defaults, kept)
    if (size := config['n_embd'] // config['n_head']) < 8 and os.environ.get('RANK', '0') == '0':
        print(f"note: --n_embd={config['n_embd']} --n_head={config['n_head']} gives heads of "
              f"{size} numbers: below 8 a head can tell few tokens apart (GPT-2's have 64); it "
              "trains, but for a model that learns give fewer --n_head or a larger --n_embd")
    world, steps = int(os.environ.get('WORLD_SIZE', 1)), config['gradient_accumulation_steps']
    if steps % world:
        raise InputError(f"--gradient_accumulation_steps={steps} counts the micro steps of all "
                         f"{world} processes: give a multiple of {world}")

def check_train_data(s, meta, data_dir, train_data, val_data, iter_num, ckpt):  # s: settings
    T, row = s['block_size'], meta['row']
    if row and T + 1 != row and os.environ.get('RANK', '0') == '0':  # SFT: the rows set it
        print(f"block_size = {row - 1}: {data_dir} holds SFT rows of {row} tokens")
    T = row - 1 if row else T
    if ckpt:  # resuming or fine-tuning: the trained model against this data
        check_start(ckpt, meta, data_dir, T)
    for name, data in (('train', train_data), ('val', val_data)) if not row else ():
        check_blocks(f"{data_dir}/{name}.bin", len(data), T)
    if (tokens := s['batch_size'] * T) > train_data.size:  # (a typo? it would fill the memory)
        raise InputError(f"--batch_size={s['batch_size']}: a batch of {tokens:,} tokens is more "
                         f"than {data_dir}/train.bin holds ({train_data.size:,}): lower it")
    path, tune = os.path.join(s['out_dir'], 'ckpt.pt'), s['init_from']
    if tune != 'resume' and os.path.exists(path) and not s['overwrite']:  # never by accident
        own = tune != 'scratch' and os.path.samefile(tune, s['out_dir'])  # (a fine-tune of it)
        fix = (f"--init_from={tune} fine-tunes it: write to another --out_dir" if own else
               f"resume it with  {resume_command()}  or start over on purpose with "
               "--overwrite=True (or another --out_dir)")
        raise InputError(f"{path} already holds a run: {fix}")
    if iter_num >= s['max_iters'] and not s['eval_only']:
        at = f"{path} is at iter {iter_num} and " if tune == 'resume' else ''
        raise InputError(f"nothing to train: {at}max_iters is {s['max_iters']}; raise --max_iters")
    check_memory({**s, 'vocab_size': meta['vocab_size'], 'block_size': T}, s['batch_size'],
                 not s['eval_only'], get_device(s['device']))

def memory(c, train):  # -> about the bytes a step needs: (the weights', a row's); c: the model's
    d, T, V, loops = c['n_embd'], c['block_size'], c['vocab_size'], c['loops']  # settings
    params = (V + T) * d + 16 * d * d * (c['n_prelude'] + len(loops) + c['n_coda'])
    if not train:  # evaluating: each iteration's state (the depth scan goes to twice the depth)
        return 4 * params, 4 * T * (d * (2 * sum(loops) + 16) + 5 * V)  # and 5 logits' copies
    runs = c['n_prelude'] + c['n_coda'] + sum(min(k, c['phantom_steps']) if c['phantom'] else k
                                              for k in loops)
    return 16 * params, 4 * T * (26 * d * runs + V * (1 + len(c['supervise'])))
    # training: weights, gradients, AdamW's moments; autograd keeps ~26 numbers a token a block run,
    # and each readout's log-softmax (bench.py --estimate measures v3 4.9 GiB, v4 13.5: 4.99, 14.2)

def check_memory(c, rows, train, device):  # before the work: a step's estimate against the free
    (fixed, row), where, free = memory(c, train), 'this machine', 0  # memory (0: unknown)
    if 'cuda' in device:
        import torch
        where, free = device, torch.cuda.mem_get_info(device)[0]
    with suppress(OSError, TypeError):  # a CPU: what Linux can give without swapping
        free = free or 1024 * int(re.search(r'MemAvailable:\s*(\d+)',
                                            open('/proc/meminfo').read())[1])
    if free and fixed + rows * row > free:
        fits = int((free * 3 // 4 - fixed) // row)  # (a quarter left for the rest, and the error)
        gb = lambda n: f"{n / 1e9:,.{int(n < 1e10)}f} GB"
        raise InputError(f"{os.path.basename(sys.argv[0])} --batch_size={rows} needs about "
                         f"{gb(fixed + rows * row)}, {where} has {gb(free)} available: "
                         + (f"try --batch_size={fits}" if fits >= 1 else
                            "the model alone needs more: a smaller one, or a larger machine"))

def check_loss(lossf, iter_num, last_loss, alphas, ckpt_path, s, given):  # s: settings
    if not math.isfinite(lossf):  # (the float settings this run gives: the likely cause)
        given = ' '.join(typed(k, s[k]) for k in sorted(given) if type(s[k]) is float)
        raise InputError(f"loss is {lossf} at iter {iter_num} (last good loss {last_loss}); "
                         f"alphas {alphas}. Lower --learning_rate or --alpha_init"
                         f"{f' (this run sets {given})' * bool(given)}; {ckpt_path} was not "
                         "overwritten.")

def lock(folder, who='training run', key='out_dir'):  # one writer at a time in folder: a lock
    made = not os.path.isdir(folder)  # that the system drops if its run dies
    os.makedirs(folder, exist_ok=True)
    f = open(os.path.join(folder, f"{'train' if key == 'out_dir' else 'prepare'}.lock"), 'a+')
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)  # (the pid that holds it, as it wrote it)
        pid = f" (pid {f.read().strip()})" * bool(f.tell())
        raise InputError(f"{folder} is being written by another {who}{pid}: wait for it to "
                         f"finish, or choose another --{key}") from None
    f.truncate(0)
    f.write(f"{os.getpid()}\n")
    f.flush()
    f.made = made and folder  # (the folder it made: it goes too, if the run left nothing in it)
    atexit.register(unlock, f)  # the run ends: its lock goes
    return f

def unlock(f):  # a lock's end (once): its file, the lock, the folder it made if left empty
    if not f.closed:
        with suppress(OSError):
            os.remove(f.name)
        f.close()
        with suppress(OSError):
            f.made and os.rmdir(f.made)

def keep_log(path, iter_num):  # a run's log.jsonl: the lines up to the iter it starts from
    lines = []
    with suppress(FileNotFoundError, ValueError):  # (a damaged line: the log starts there)
        for line in open(path, encoding='utf-8'):
            if json.loads(line)['iter'] > iter_num:
                break
            lines.append(line)
    with written(path) as f:
        f.writelines(lines)

def append(path, record):  # a line of a run's log: one write, so never a torn line
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(record) + '\n').encode())
        finally:
            os.close(fd)
    except OSError as e:
        raise refused(path, e, "free some space, or write elsewhere") from None

def ran_on():  # -> where a run runs: commit ('+': the tree differs), torch, CPU, threads
    import platform, subprocess, torch
    git = subprocess.Popen(['git', '-C', os.path.dirname(os.path.abspath(__file__)), 'describe',
                            '--always', '--dirty=+', '--exclude=*'], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True).communicate()[0]
    info = open('/proc/cpuinfo').read() if os.path.exists('/proc/cpuinfo') else ''  # (Linux)
    cpu = re.findall(r'^model name\s*: (.*)', info, re.M) or [platform.machine()]
    chip = re.search(r'family\s*: (\d+)\nmodel\s*: (\d+)\n(?:.*\n)*?stepping\s*: (\d+)', info)
    if chip:  # a VM's model name may be only 'AMD EPYC': family, model and stepping name the chip
        cpu[0] += ' (family {} model {} stepping {})'.format(*chip.groups())
    return dict(commit=git.strip() or 'unknown', torch=torch.__version__, cpu=cpu[0],
                threads=torch.get_num_threads())

class Progress:  # a long loop says how far it is, every 5 s: progress(text) at each turn
    def __init__(self, file=None):  # (eval.py: stderr, its stdout is the report)
        self.t0, self.file = time.time(), file

    def __call__(self, text):
        if time.time() - self.t0 > 5:
            print(text, file=self.file, flush=True)
            self.t0 = time.time()

class Stop:  # Ctrl-C, SIGTERM, SIGHUP or a failed stdout ask to stop: finish the step, save, exit
    def __init__(self, ckpt_path, master):  # (asked again: stop at once)
        self.signals, self.ckpt_path, self.master = [], ckpt_path, master
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) != signal.SIG_IGN or signum != signal.SIGHUP:  # (nohup)
                signal.signal(signum, self.request)
        Printed.stop = self  # a stdout that fails (| head closed, a terminal gone) asks, below

    def stdout_failed(self):  # (Ctrl-C in `| tee` ends tee too: that is not a second ask)
        if not self.signals:
            self.request(signal.SIGPIPE, None)

    def request(self, signum, frame):
        self.signals.append(signum)
        if len(self.signals) > 1:
            raise SystemExit(f"stopped at once; {self.ckpt_path} holds the last saved checkpoint")
        if self.master:  # (under DDP the save needs every process: one that is gone stops it)
            every = ', if every process gets there' * (os.environ.get('WORLD_SIZE', '1') != '1')
            print(f"\nstopping: finishing this step, then saving {self.ckpt_path}{every}; resume "
                  f"with  {resume_command()}  (again: stop at once)")

    def read(self, loss, val, ddp):  # -> (the loss, asked to stop?): one read of the device
        import torch  # (a val loss that is not finite counts as the loss: the run diverged)
        flags = torch.stack([loss, *loss.new_tensor([len(self.signals), val])])
        if ddp:  # any rank asked, or diverged: all stop together, or the others would hang
            torch.distributed.all_reduce(flags)
        lossf, asked, val = flags.tolist()
        return (lossf if math.isfinite(val) else val), asked > 0

    def exit(self):  # a signal: exit as a shell reports it (130 Ctrl-C, 143 SIGTERM, 141 a pipe)
        if self.signals:
            sys.exit(128 + self.signals[0])

@contextmanager
def saving(path, what=''):  # every file a script writes: a temporary file of this run beside it
    real, through = target(path)  # to write, and once whole: fsynced, renamed to path (a link's
    tmp = real if through else f'{real}.{os.getpid()}.tmp'  # target; a device: written through)
    try:  # (else path is left as it was)
        os.makedirs(os.path.dirname(real) or '.', exist_ok=True)  # (its folder, if new)
        yield tmp
        if not through:
            fd = os.open(tmp, os.O_RDONLY)
            os.fsync(fd)  # (on disk before the rename: a power loss leaves the old file or the new)
            os.close(fd)
            os.replace(tmp, real)
    except (OSError, RuntimeError) as e:  # any refusal of the OS; torch's writer wraps it
        cause = e if isinstance(e, OSError) else e.__context__
        if isinstance(cause, (SystemExit, KeyboardInterrupt)):  # (a second stop signal)
            raise cause from None
        if not isinstance(cause, OSError):
            raise
        kept = 'it is left as it was: ' * os.path.exists(path)
        raise refused(f"{path}{what and ' '}{what}", cause, f"{kept}free some space, or write "
                      "elsewhere") from None
    finally:  # (no partial file is left behind)
        if not through:
            with suppress(OSError):
                os.remove(tmp)

@contextmanager
def written(path, mode='w'):  # -> saving's file, open to write
    with saving(path) as tmp, open(tmp, mode, encoding=None if 'b' in mode else 'utf-8') as f:
        yield f

def check_prepared(out_dir, train, held, sft_block):  # prepare.py: eval.py needs held-out docs
    if not (held and train):
        raise InputError(f"no {'training' if held else 'held-out'} documents left for {out_dir}"
                         + f": raise --block_size={sft_block}" * bool(sft_block))

def digest(state):  # a checksum of a checkpoint's weights: saved beside them, checked on load
    import hashlib, torch
    h = hashlib.sha256()
    for name, t in sorted(state.items()):
        h.update(name.encode())
        h.update(t.detach().cpu().reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()

def save(ckpt, path, iter_num):  # torch.save, atomically (saving), with its checksum
    import torch  # (to a file: torch's writer then keeps the OSError it met)
    with saving(path, f"(at iter {iter_num})") as tmp, open(tmp, 'wb') as f:
        torch.save({**ckpt, 'digest': digest(ckpt['model'])}, f)

class Printed:  # every script's stdout: each write flushed, so that one the OS refuses
    stop = None  # (> /dev/full) fails at the print that meets it, named, as one that cannot
    # encode a character (PYTHONIOENCODING=ascii): the excepthook's line. Training: a Stop

    def __init__(self, out):
        self.out = out

    def write(self, text):
        try:
            self.out.write(text)
            self.out.flush()
        except UnicodeEncodeError as e:
            raise InputError(f"stdout's encoding, {e.encoding}, has no character U+"
                             f"{ord(e.object[e.start]):04X}: set PYTHONIOENCODING=utf-8 (or a "
                             "UTF-8 locale)") from None
        except OSError as e:  # (what is left to print, the exit's flush too, goes nowhere)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            if self.stop:  # training: finish the step, save, exit
                return self.stop.stdout_failed()
            e.filename = e.filename or 'stdout'
            raise

    def __getattr__(self, name):  # the rest of stdout's: flush, fileno, encoding, ...
        return getattr(self.out, name)

sys.excepthook = excepthook  # imported first by every script: its one entry handler, from the
if sys.stdout is sys.__stdout__ and sys.stdout:  # first print on (where no test replaced stdout)
    sys.stdout = Printed(sys.stdout)
