"""prepare.py on small files in each source's real format (the topic sources, llm.c FineWeb
shards), served from a local HTTP server or read from a mirror folder: no network needed."""
import csv, functools, gzip, http.server, io, json, os, re, subprocess, sys, threading, zipfile
from collections import Counter
from contextlib import contextmanager

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
import harness
import guards
import prepare
import depthmap

# ---------------------------------------------------------------- fixture sources, in real formats
ALPACA = [{'instruction': f'Write function f{i}.', 'input': 'n = 3' if i % 2 else '',
           'output': f'def f{i}():\n    return {i}', 'response': 'unused'} for i in range(5)]
HUMANEVAL = [{'task_id': f'HumanEval/{i}', 'prompt': f'def g{i}(x):\n    """add {i}"""\n',
              'canonical_solution': f'    return x + {i}\n', 'test': 'def check(c): pass',
              'entry_point': f'g{i}'} for i in range(2)]
GSM = {split: [{'question': f'Q{split}{i}: what is {i} + 1?',
                'answer': f'{i} + 1 = <<{i}+1={i + 1}>>{i + 1}\n#### {i + 1}'} for i in range(n)]
       for split, n in (('train', 4), ('test', 2))}
DIALOGUE = {split: [f"Hello {split} {i} , how are you ? __eou__ I don ' t know , "
                    "it \u2019 s late ! __eou__ Bye . __eou__" for i in range(2)]
            for split in ('train', 'validation', 'test')}
NEWS = [['3', f'Title {i}', f'Line one\\Line two costs #36;{i}'] for i in range(6)]
SONNETS = [f'Sonnet {i}, first line,\nsecond line, the end.' for i in range(6)]
SPEECHES = [f'Speaker {i}:\nThis is speech {i}.\nIt has two lines.' for i in range(30)]

EXPECTED = {  # the documents each source must give, by hand
    'code': [f'Write function f{i}.\n' + ('n = 3\n' if i % 2 else '')
             + f'def f{i}():\n    return {i}' for i in range(5)]
            + [f'def g{i}(x):\n    """add {i}"""\n    return x + {i}\n' for i in range(2)],
    'math': [f'Q{s}{i}: what is {i} + 1?\n{i} + 1 = <<{i}+1={i + 1}>>{i + 1}\n#### {i + 1}'
             for s, n in (('train', 4), ('test', 2)) for i in range(n)],
    'dialogue': [f"Hello {s} {i}, how are you?\nI don't know, it\u2019s late!\nBye."
                 for s in ('train', 'validation', 'test') for i in range(2)],
    'news': [f'Title {i}\nLine one\nLine two costs ${i}' for i in range(6)],
    'poetry': SONNETS,
}

# FineWeb in llm.c's format, at the URL path the issue gives (so the mirror layout is checked too)
HF_PATH = 'datasets/kjj0/fineweb10B-gpt2/resolve/main'  # under https://huggingface.co/
FINEWEB_DIR = 'huggingface.co/' + HF_PATH  # under the mirror
_rng = np.random.default_rng(0)
SHARDS = {('val', 0): _rng.integers(0, 50257, 300), ('train', 1): _rng.integers(0, 50257, 1000),
          ('train', 2): _rng.integers(0, 50257, 777), ('train', 3): _rng.integers(0, 50257, 50)}
SHARDS[('train', 1)][:3] = [50256, 0, 50256]  # EOT and 0 survive the copy

def shard_bytes(tokens, magic=20240520, version=1, count=None):
    """An llm.c shard: a header of 256 int32 (magic, version, token count), then uint16 tokens."""
    header = np.zeros(256, '<i4')
    header[:3] = magic, version, len(tokens) if count is None else count
    return header.tobytes() + np.asarray(tokens, '<u2').tobytes()

def shard_path(root, split, i):
    return os.path.join(root, FINEWEB_DIR, f'fineweb_{split}_{i:06d}.bin')

def write(root, path, data):
    p = os.path.join(root, prepare.HOST, path)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, 'wb') as f:
        f.write(data if isinstance(data, bytes) else data.encode('utf-8'))

def dialogue_zip(split):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, 'w') as z:
        z.writestr(f'{split}/', '')
        z.writestr(f'{split}/dialogues_{split}.txt', '\n'.join(DIALOGUE[split]) + '\n')
        z.writestr(f'{split}/dialogues_act_{split}.txt', '1 2 3\n')  # a sibling, never read
        z.writestr('../evil.txt', 'must never be written to disk')  # would escape if extracted
    return buf.getvalue()

@pytest.fixture
def sources(tmp_path):
    """A mirror folder laid out as <root>/<host>/<path>, holding every source file and shard."""
    root = str(tmp_path / 'mirror')
    write(root, prepare.CODEALPACA, json.dumps(ALPACA, indent=4))
    humaneval = ''.join(json.dumps(r) + '\n' for r in HUMANEVAL)
    write(root, prepare.HUMANEVAL, gzip.compress(humaneval.encode()))
    for split, rows in GSM.items():
        write(root, prepare.GSM8K % split, ''.join(json.dumps(r) + '\n' for r in rows))
    for split in DIALOGUE:
        write(root, prepare.DAILYDIALOG % split, dialogue_zip(split))
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL).writerows(NEWS)
    write(root, prepare.AGNEWS, buf.getvalue())
    write(root, prepare.SONNETS, '\n\n'.join(SONNETS + [SONNETS[0]]) + '\n')  # a repeat: kept once
    write(root, prepare.SHAKESPEARE, '\n\n'.join(SPEECHES) + '\n')
    os.makedirs(os.path.join(root, FINEWEB_DIR))
    for (split, i), tokens in SHARDS.items():
        with open(shard_path(root, split, i), 'wb') as f:
            f.write(shard_bytes(tokens))
    return root

class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

class CutOff(Quiet):  # promises 100,000 bytes, sends 7, hangs up
    def do_GET(self):
        self.send_response(200)
        self.send_header('Content-Length', '100000')
        self.end_headers()
        self.wfile.write(b'partial')
        self.close_connection = True

@contextmanager
def serve(handler):
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f'http://127.0.0.1:{srv.server_address[1]}'
    finally:
        srv.shutdown()
        srv.server_close()

@pytest.fixture
def server(sources):  # serves the topic sources, as raw.githubusercontent.com would
    with serve(functools.partial(Quiet, directory=os.path.join(sources, prepare.HOST))) as url:
        yield url

@pytest.fixture
def hf_server(sources):  # serves the shards, as huggingface.co would
    with serve(functools.partial(Quiet, directory=os.path.join(sources, prepare.HF_HOST))) as url:
        yield url

@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):  # a proxy in the environment must not intercept the local server
    for k in ('NO_PROXY', 'no_proxy'):
        monkeypatch.setenv(k, '127.0.0.1,localhost')

def run(*args, cwd=REPO):  # a process of its own (forked: harness.py), with this test's environment
    return harness.run(cwd, 'prepare.py', *args, env={**os.environ, 'OMP_NUM_THREADS': '1'})

def assert_one_line_error(r, *needles):
    assert r.returncode != 0
    assert 'Traceback' not in r.stderr, r.stderr
    lines = harness.told(r.stderr)
    assert len(lines) == 1 and lines[0].startswith('error: '), r.stderr
    for s in needles:
        assert s in lines[0], (s, lines[0])

def read_outputs(out_dir):
    """-> (meta, held-out docs, trained docs in file order) of a prepared folder."""
    meta = prepare.load_meta(str(out_dir))
    _, decode, eot = prepare.get_tokenizer(meta['tokenizer'])
    held, n_bad = prepare.read_eval_docs(os.path.join(out_dir, 'eval.jsonl'))
    assert n_bad == 0
    trained = []
    for split in ('train', 'val'):
        ids = prepare.load_tokens(str(out_dir), split)
        assert ids.dtype == np.dtype(meta['dtype']) and len(ids) and ids[-1] == eot  # EOT ends docs
        trained += [decode(doc[:-1]) for doc in np.split(ids, np.flatnonzero(ids == eot) + 1)[:-1]]
    return meta, held, trained

def snapshot(out_dir):
    return {f: open(os.path.join(out_dir, f), 'rb').read() for f in sorted(os.listdir(out_dir))}

def files_under(d):
    return [os.path.join(p, f) for p, _, fs in os.walk(d) for f in fs]

# ---------------------------------------------------------------- tests: topics and shakespeare
def test_each_format_parses_into_documents(sources, monkeypatch, tmp_path):
    monkeypatch.setattr(prepare, 'mirror', sources)
    monkeypatch.chdir(tmp_path)
    topics = prepare.DATASETS['topics']
    docs = {topic: list(dict.fromkeys(source())) for topic, source in topics.items()}
    assert docs == EXPECTED
    code, math, dialogue, news = docs['code'], docs['math'], docs['dialogue'], docs['news']
    assert code[-1] == 'def g1(x):\n    """add 1"""\n    return x + 1\n'  # prompt + solution
    assert math[0] == 'Qtrain0: what is 0 + 1?\n0 + 1 = <<0+1=1>>1\n#### 1'  # question, answer
    assert dialogue[-1] == "Hello test 1, how are you?\nI don't know, it\u2019s late!\nBye."
    assert news[5] == 'Title 5\nLine one\nLine two costs $5'  # '\' -> newline, '#36;' -> '$'
    assert not any(f.endswith('evil.txt') for f in files_under(tmp_path.parent))  # never extracted

def test_topics_end_to_end_over_http(sources, server, tmp_path):
    root = tmp_path / 'data'
    r = run('--dataset=topics', '--tokenizer=byte', f'--base_url={server}', f'--data_root={root}',
            '--eval_docs=2')
    assert r.returncode == 0, r.stderr
    meta, held, trained = read_outputs(root / 'topics_byte')
    assert meta == {'tokenizer': 'byte', 'vocab_size': 257, 'eot': 256, 'dtype': 'uint16', 'row': 0}
    assert Counter(d['topic'] for d in held) == {t: 2 for t in EXPECTED}
    assert all(d['text'] in EXPECTED[d['topic']] for d in held)
    everything = [d for docs in EXPECTED.values() for d in docs]
    assert sorted(trained + [d['text'] for d in held]) == sorted(everything)  # each doc once
    for topic in EXPECTED:
        assert f'{topic}: kept' in r.stdout
    downloads = files_under(root / 'downloads')
    assert len(downloads) == 9 and not any(f.endswith('.tmp') for f in downloads)
    assert not any(f.endswith('.tmp') for f in files_under(root / 'topics_byte'))

def test_rerun_is_byte_identical_and_mirror_matches_download(sources, server, tmp_path):
    args = ['--dataset=topics', '--tokenizer=byte', '--eval_docs=2']
    assert run(*args, f'--base_url={server}', f'--data_root={tmp_path / "a"}').returncode == 0
    first = snapshot(tmp_path / 'a' / 'topics_byte')
    r = run(*args, f'--base_url={server}', f'--data_root={tmp_path / "a"}')  # now from the cache
    assert r.returncode == 0 and snapshot(tmp_path / 'a' / 'topics_byte') == first
    r = run(*args, f'--mirror={sources}', f'--data_root={tmp_path / "b"}')
    assert r.returncode == 0, r.stderr
    assert snapshot(tmp_path / 'b' / 'topics_byte') == first
    assert not os.path.exists(tmp_path / 'b' / 'downloads')  # the mirror is read in place
    r = run(*args, f'--mirror={tmp_path / "a" / "downloads"}', f'--data_root={tmp_path / "c"}')
    assert r.returncode == 0 and snapshot(tmp_path / 'c' / 'topics_byte') == first  # same layout

def test_shakespeare_keeps_order(sources, tmp_path):
    r = run('--dataset=shakespeare', '--tokenizer=byte', f'--mirror={sources}',
            f'--data_root={tmp_path}', '--eval_docs=5')
    assert r.returncode == 0, r.stderr
    meta, held, trained = read_outputs(tmp_path / 'shakespeare_byte')
    assert [d['topic'] for d in held] == ['shakespeare'] * 5
    held_texts = {d['text'] for d in held}
    assert trained == [s for s in SPEECHES if s not in held_texts]  # train then val, in order
    assert len(prepare.load_tokens(str(tmp_path / 'shakespeare_byte'), 'val')) > 0

def test_mirror_missing_file_is_one_line_error(sources, tmp_path):
    empty = tmp_path / 'empty'
    empty.mkdir()
    assert_one_line_error(run('--dataset=topics', '--tokenizer=byte', f'--mirror={empty}'),
                          os.path.join(str(empty), prepare.HOST, prepare.CODEALPACA))
    os.remove(os.path.join(sources, prepare.HOST, prepare.AGNEWS))
    r = run('--dataset=topics', '--tokenizer=byte', f'--mirror={sources}',
            f'--data_root={tmp_path / "d"}', '--eval_docs=2')
    assert_one_line_error(r, os.path.join(sources, prepare.HOST, prepare.AGNEWS), '<host>/<path>')
    assert not os.path.exists(tmp_path / 'd' / 'topics_byte' / 'meta.json')

def test_a_mirror_that_is_not_there_is_named(tmp_path):
    """--mirror at a folder that is missing (a typo, another working directory) used to be 'nowhere/raw.githubuser
    content.com/.../new_codealpaca.json not found: --mirror must be laid out as <host>/<path>'."""
    r = run('--dataset=topics', '--tokenizer=byte', '--mirror=nowhere', f'--data_root={tmp_path / "d"}', cwd=tmp_path)
    assert_one_line_error(r, f'--mirror=nowhere: no such folder (in {tmp_path}): give a folder that is there')
    assert os.listdir(tmp_path) == []

def test_failed_download_names_url_and_mirror(tmp_path):
    with serve(functools.partial(Quiet, directory=str(tmp_path))) as url:  # serves nothing: 404
        r = run('--dataset=shakespeare', '--tokenizer=byte', f'--base_url={url}',
                f'--data_root={tmp_path / "d"}')
    assert_one_line_error(r, f'{url}/{prepare.SHAKESPEARE}', '404', '--mirror=../shared/data')
    assert files_under(tmp_path / 'd') == []

def test_cut_off_download_leaves_nothing_and_next_run_works(sources, server, tmp_path):
    root = tmp_path / 'd'
    args = ['--dataset=topics', '--tokenizer=byte', f'--data_root={root}', '--eval_docs=2']
    with serve(CutOff) as url:
        r = run(*args, f'--base_url={url}')
    assert_one_line_error(r, f'{url}/{prepare.CODEALPACA}', '--mirror')
    assert files_under(root) == []  # no partial file that a later run could take for the real one
    r = run(*args, f'--base_url={server}')
    assert r.returncode == 0, r.stderr
    downloaded = os.path.join(root, 'downloads', prepare.HOST, prepare.CODEALPACA)
    assert os.path.getsize(downloaded) == len(json.dumps(ALPACA, indent=4))

def test_a_file_size_limit_during_a_download_is_one_line_and_leaves_nothing(sources, server, tmp_path):
    """A download is stored through the one atomic write: a disk that refuses it (here a file-size limit, SIGXFSZ
    ignored) is 'cannot write' naming the file, not 'download failed', and no part of it is left to be taken for
    the whole file by a later run."""
    from harness import LIMITED
    root = tmp_path / 'd'
    limit = len(json.dumps(ALPACA, indent=4)) // 2
    r = harness.finish(harness.SERVER.start(
        ['-c', LIMITED, str(limit), os.path.join(REPO, 'prepare.py'), '--dataset=topics', '--tokenizer=byte',
         f'--data_root={root}', f'--base_url={server}'], tmp_path, {**os.environ, 'OMP_NUM_THREADS': '1'}))
    downloaded = os.path.join(root, 'downloads', prepare.HOST, prepare.CODEALPACA)
    assert_one_line_error(r, f'cannot write {downloaded}', 'File too large')
    assert files_under(root) == []


def test_fetch_caches_and_reuses(sources, server, tmp_path, monkeypatch):
    monkeypatch.setattr(prepare, 'data_root', str(tmp_path))
    monkeypatch.setattr(prepare, 'base_url', server)
    assert prepare.read(prepare.SONNETS).startswith(SONNETS[0])
    with serve(CutOff) as url:
        monkeypatch.setattr(prepare, 'base_url', url)
        assert prepare.read(prepare.SONNETS).startswith(SONNETS[0])  # the cache, not the server
        with pytest.raises(ValueError, match='--mirror'):
            prepare.fetch(prepare.SHAKESPEARE)
    assert not any(f.endswith('.tmp') for f in files_under(tmp_path))

def test_interrupted_rerun_leaves_the_folder_as_it_was(sources, tmp_path, monkeypatch):
    """A rerun with another split, stopped (Ctrl-C) after it wrote train.bin: the folder must stay
    the first run's, whole (it held the new train.bin beside the old val.bin: held-out docs in
    train.bin)."""
    settings = dict(mirror=sources, data_root=str(tmp_path / 'data'), tokenizer='byte', eval_docs=2)
    for key, value in settings.items():
        monkeypatch.setattr(prepare, key, value)
    root = tmp_path / 'data'
    prepare.main()
    first = snapshot(root / 'topics_byte')
    monkeypatch.setattr(prepare, 'eval_docs', 1)

    wrote = []

    def ctrl_c_after_the_first_file(*args, **kw):  # (in the write of the second)
        wrote.extend(a for a in args if str(a).startswith('wrote'))
        if len(wrote) == 2:
            raise KeyboardInterrupt
    monkeypatch.setattr(prepare, 'print', ctrl_c_after_the_first_file, raising=False)
    with pytest.raises(KeyboardInterrupt):
        prepare.main()
    assert snapshot(root / 'topics_byte') == first and os.listdir(root) == ['topics_byte']
    monkeypatch.setattr(prepare, 'print', lambda *a, **k: None, raising=False)
    prepare.main()  # the rerun, not stopped: the new folder whole
    assert snapshot(root / 'topics_byte') != first and os.listdir(root) == ['topics_byte']
    held = read_outputs(root / 'topics_byte')[1]
    assert Counter(d['topic'] for d in held) == {t: 1 for t in EXPECTED}

def test_two_prepares_into_one_folder(sources, tmp_path):
    """Two prepare.py at once into data/topics_byte: the first holds the folder (it waits on a download, from a
    server that answers only when told), the second is refused in one line naming the first; the first then ends
    with one whole dataset. They used to write the same .tmp files and remove each other's folder."""
    arrived, go = threading.Event(), threading.Event()

    class Held(Quiet):  # answers each request once the test says go
        def do_GET(self):
            arrived.set()
            go.wait()
            super().do_GET()
    args = ['--dataset=topics', '--tokenizer=byte', '--eval_docs=2', f'--data_root={tmp_path / "data"}']
    env = {**os.environ, 'OMP_NUM_THREADS': '1'}
    with serve(functools.partial(Held, directory=os.path.join(sources, prepare.HOST))) as url:
        first = harness.start(tmp_path, 'prepare.py', *args, f'--base_url={url}', env=env)
        arrived.wait(harness.PATIENCE)  # the first has the lock: it downloads
        second = harness.run(tmp_path, 'prepare.py', *args, f'--mirror={sources}', env=env)
        go.set()
        pid, first = first.pid, harness.finish(first)
    assert first.returncode == 0, first.stderr
    assert_one_line_error(second, f'{tmp_path / "data" / "topics_byte"} is being written by another prepare.py '
                                  f'(pid {pid})', 'wait for it', '--dataset')
    meta, held, trained = read_outputs(tmp_path / 'data' / 'topics_byte')  # one whole dataset
    assert Counter(d['topic'] for d in held) == {t: 2 for t in EXPECTED}
    assert sorted(os.listdir(tmp_path / 'data' / 'topics_byte')) == ['eval.jsonl', 'meta.json', 'train.bin',
                                                                     'val.bin']

def test_data_root_that_is_a_file_is_one_line_error(sources, tmp_path):
    (tmp_path / 'afile').write_text('')
    r = run('--tokenizer=byte', f'--mirror={sources}', f'--data_root={tmp_path / "afile"}')
    assert_one_line_error(r, 'cannot write', 'afile: File exists', '--data_root')

def test_pieces_decode_a_character_of_several_tokens_whole():
    encode, decode, eot = prepare.get_tokenizer('byte')
    ids = encode('a£b日') + [eot] + [0xe6, 0x97]  # '£': 2 bytes, '日': 3; a cut character at the end
    assert depthmap.pieces(ids, decode) == [('a', 0, 1), ('£', 1, 3), ('b', 3, 4), ('日', 4, 7),
                                           ('<|endoftext|>', 7, 8), ('\ufffd', 8, 10)]
    runs = depthmap.pieces([0xff, 0xff, 0x61], decode)  # bytes that are not UTF-8: each alone
    assert [j - i for _, i, j in runs] == [1, 1, 1]

def test_bad_arguments_are_one_line_errors(tmp_path):
    assert_one_line_error(run('--dataset=nope', f'--data_root={tmp_path}'),
                          "--dataset=nope", 'shakespeare', 'fineweb')
    assert_one_line_error(run('--tokenizer=nope', f'--data_root={tmp_path}'),
                          "--tokenizer=nope", 'byte')
    assert_one_line_error(run('--dataset=fineweb', '--tokenizer=byte', f'--data_root={tmp_path}'),
                          'fineweb', '--tokenizer=gpt2')
    assert os.listdir(tmp_path) == []

# ---------------------------------------------------------------- tests: fineweb shards
def fineweb(*args, eval_docs=2):
    return run('--dataset=fineweb', f'--eval_docs={eval_docs}', *args)

def test_fineweb_over_http_token_for_token(sources, server, hf_server, tmp_path):
    root = tmp_path / 'data'
    urls = [f'--base_url={server}', f'--hf_url={hf_server}']
    r = fineweb('--shards=2', *urls, f'--data_root={root}')
    assert r.returncode == 0, r.stderr
    out = str(root / 'fineweb')
    assert prepare.load_meta(out) == {'tokenizer': 'gpt2', 'vocab_size': 50257, 'eot': 50256,
                                      'dtype': 'uint16', 'row': 0}
    train, val = prepare.load_tokens(out, 'train'), prepare.load_tokens(out, 'val')
    assert isinstance(train, np.memmap) and train.dtype == np.uint16
    assert train.tolist() == SHARDS['train', 1].tolist() + SHARDS['train', 2].tolist()  # no headers
    assert val.tolist() == SHARDS['val', 0].tolist()
    shards = sorted(os.path.basename(f) for f in files_under(root / 'downloads' / prepare.HF_HOST))
    assert shards == ['fineweb_train_000001.bin', 'fineweb_train_000002.bin',
                      'fineweb_val_000000.bin']  # only the shards asked for
    # eval.jsonl: the very documents that --dataset=topics holds out
    r = run('--dataset=topics', '--tokenizer=byte', f'--mirror={sources}', f'--data_root={root}',
            '--eval_docs=2')
    assert r.returncode == 0, r.stderr
    held = (root / 'topics_byte' / 'eval.jsonl').read_bytes()
    assert (root / 'fineweb' / 'eval.jsonl').read_bytes() == held
    assert sum(1 for _ in open(root / 'fineweb' / 'eval.jsonl')) == 2 * len(EXPECTED)
    # a rerun reuses the downloads (a cut-off server would fail any download) ...
    first = snapshot(out)
    with serve(CutOff) as url:
        r = fineweb('--shards=2', f'--base_url={url}', f'--hf_url={url}', f'--data_root={root}')
        assert r.returncode == 0 and snapshot(out) == first, r.stderr
        # ... and downloads only what is missing: here train shard 3, whose failure is named
        r = fineweb('--shards=3', f'--base_url={url}', f'--hf_url={url}', f'--data_root={root}')
    assert_one_line_error(r, f'{url}/{HF_PATH}/fineweb_train_000003.bin', '--mirror')
    assert snapshot(out) == first  # the earlier data stays whole
    assert fineweb('--shards=3', *urls, f'--data_root={root}').returncode == 0
    assert len(prepare.load_tokens(out, 'train')) == 1000 + 777 + 50

def test_fineweb_mirror_layout(sources, tmp_path):
    r = fineweb('--shards=3', f'--mirror={sources}', f'--data_root={tmp_path}')
    assert r.returncode == 0, r.stderr
    train = prepare.load_tokens(str(tmp_path / 'fineweb'), 'train')
    assert np.array_equal(train, np.concatenate([SHARDS['train', i] for i in (1, 2, 3)]))
    assert not os.path.exists(tmp_path / 'downloads')  # the mirror is read in place
    r = fineweb('--shards=4', f'--mirror={sources}', f'--data_root={tmp_path}')
    assert_one_line_error(r, shard_path(sources, 'train', 4), '<host>/<path>')

@pytest.mark.parametrize('bad', ['magic', 'truncated'])
def test_bad_shard_is_one_line_error_naming_the_file(sources, tmp_path, bad):
    path = shard_path(sources, 'train', 2)
    tokens = SHARDS['train', 2]
    with open(path, 'wb') as f:  # a wrong magic number, or a header promising one token more
        f.write(shard_bytes(tokens, magic=20240521) if bad == 'magic' else
                shard_bytes(tokens, count=len(tokens) + 1))
    r = fineweb('--shards=2', f'--mirror={sources}', f'--data_root={tmp_path}')
    assert_one_line_error(r, path, 'llm.c', '20240520')
    assert not os.path.exists(tmp_path / 'fineweb')  # refused before anything is written

def test_read_shard_checks_the_header(tmp_path):
    path = str(tmp_path / 'shard.bin')
    for data in [b'', b'\0' * 1000, shard_bytes([1, 2], version=2), shard_bytes([1, 2]) + b'\0',
                 shard_bytes([1, 2], count=3), shard_bytes([1, 2, 3])[:-1]]:
        with open(path, 'wb') as f:
            f.write(data)
        with pytest.raises(ValueError, match=re.escape(path)):
            prepare.read_shard(path)
    with open(path, 'wb') as f:
        f.write(shard_bytes([7, 50256, 65535]))
    assert prepare.read_shard(path).tolist() == [7, 50256, 65535]

# ---------------------------------------------------------------- tests: the readers others import
def test_import_has_no_side_effects(tmp_path):
    code = 'import prepare'  # (it imports model.py, so torch, for InputError: bad input's class)
    r = subprocess.run([sys.executable, '-c', code], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, 'PYTHONPATH': REPO}, timeout=harness.PATIENCE)
    assert r.returncode == 0 and r.stdout == '' and r.stderr == '', r.stderr
    assert os.listdir(tmp_path) == []

def test_load_meta_names_the_prepare_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    command = r'python prepare\.py --dataset=%s --tokenizer=%s$'
    with pytest.raises(ValueError, match=command % ('topics', 'byte')):
        prepare.load_meta('data/topics_byte')
    with pytest.raises(ValueError, match=command % ('shakespeare', 'gpt2')):
        prepare.load_meta(os.path.join('data', 'shakespeare'))
    with pytest.raises(ValueError, match=command % ('topics', 'gpt2 --data_root=elsewhere')):
        prepare.load_meta('elsewhere/topics/')

def test_read_eval_docs_skips_and_counts_malformed(tmp_path):
    lines = ['{"topic": "math", "text": "1 + 1 = 2"}', '{"topic": "code", "text": ',
             '{"topic": "news"}', '{"topic": "news", "text": 3}', '["topic", "text"]', '',
             '{"topic": "poetry", "text": "caf\u00e9 \u2014 \u65e5\u672c"}', 'not json at all']
    (tmp_path / 'eval.jsonl').write_text('\n'.join(lines) + '\n', encoding='utf-8')
    docs, n_bad = prepare.read_eval_docs(str(tmp_path / 'eval.jsonl'))
    assert [d['text'] for d in docs] == ['1 + 1 = 2', 'caf\u00e9 \u2014 \u65e5\u672c']
    assert n_bad == 5

def test_byte_tokenizer():
    encode, decode, eot = prepare.get_tokenizer('byte')
    text = 'Hello, w\u00f6rld \u2014 \u65e5\u672c\u8a9e \U0001f642\n'
    ids = encode(text)
    assert eot == 256 and max(ids) < 256 and decode(ids) == text
    ids = np.array(encode('hi') + [eot] + encode('!'), dtype=np.uint16)
    assert decode(ids) == 'hi<|endoftext|>!'  # a document boundary shows, as GPT-2's does
    assert decode([0xe6, 0x97]) == '\ufffd'  # a cut multi-byte char never raises
    with pytest.raises(ValueError, match="'gpt2' or 'byte'"):
        prepare.get_tokenizer('bpe')

def test_gpt2_without_bpe_files_is_one_line_error(tmp_path):
    proxy = 'http://127.0.0.1:9'  # blocks any download
    env = {**os.environ, 'TIKTOKEN_CACHE_DIR': str(tmp_path),
           'HTTPS_PROXY': proxy, 'https_proxy': proxy}
    r = harness.run(REPO, 'prepare.py', '--tokenizer=gpt2', f'--data_root={tmp_path}', env=env)
    assert_one_line_error(r, 'TIKTOKEN_CACHE_DIR', '--tokenizer=byte')

def _tiktoken_cache():
    d = os.environ.get('TIKTOKEN_CACHE_DIR', '')
    return d if d and os.path.isdir(d) and os.listdir(d) else None

@pytest.mark.skipif(_tiktoken_cache() is None, reason='needs TIKTOKEN_CACHE_DIR: GPT-2 BPE files')
def test_gpt2_tokenizer(sources, tmp_path):
    encode, decode, eot = prepare.get_tokenizer('gpt2')
    text = 'Hello world, caf\u00e9 \u2014 <|endoftext|> stays text'
    assert eot == 50256 and decode(encode(text)) == text and eot not in encode(text)  # stays text
    assert decode(encode('a') + [eot] + encode('b')) == 'a<|endoftext|>b'  # as with 'byte'
    r = run('--dataset=shakespeare', '--tokenizer=gpt2', f'--mirror={sources}',
            f'--data_root={tmp_path}', '--eval_docs=5')
    assert r.returncode == 0, r.stderr
    meta, held, trained = read_outputs(tmp_path / 'shakespeare')
    assert meta == {'tokenizer': 'gpt2', 'vocab_size': 50257, 'eot': 50256, 'dtype': 'uint16', 'row': 0}
    assert len(trained) == len(SPEECHES) - 5 and all(t in SPEECHES for t in trained)


@pytest.mark.parametrize('damage', ['truncated_zip', 'truncated_gzip', 'malformed_json'])
def test_a_damaged_file_in_the_mirror_is_named(sources, tmp_path, damage):
    """A truncated archive or malformed JSON in the mirror (or the download cache) used to be a BadZipFile,
    EOFError or JSONDecodeError traceback that named no file."""
    path = {'truncated_zip': prepare.DAILYDIALOG % 'train', 'truncated_gzip': prepare.HUMANEVAL,
            'malformed_json': prepare.CODEALPACA}[damage]
    local = os.path.join(sources, prepare.HOST, path)
    data = open(local, 'rb').read()
    with open(local, 'wb') as f:
        f.write(data[:len(data) // 2])
    r = run('--dataset=topics', '--tokenizer=byte', f'--mirror={sources}', f'--data_root={tmp_path / "d"}')
    assert_one_line_error(r, local, 'is damaged', 'delete it')
    assert not os.path.exists(tmp_path / 'd' / 'topics_byte')
