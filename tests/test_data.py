"""Data files, as the scripts read them (prepare.py's load_meta, load_tokens and read_eval_docs; guards.check_blocks
and check_start): a meta.json, a token file or an eval.jsonl that is missing, empty, cut short, not UTF-8, not JSON,
of another tokenizer, too short for a row, or a FIFO where a file belongs, is named in one line with the command
that makes it again, and nothing in out/ or data/ changes; a malformed line of eval.jsonl is skipped and counted,
never read with a replacement character; a re-prepare that finds no held-out documents keeps the old folder whole.

A case that needs the process boundary runs as a process in the background (harness.py's @work); the readers run
here."""
import json, os, threading

import numpy as np
import pytest

import prepare
from harness import *  # noqa: F401,F403  (helpers, tables' runners and the jobs/job/here fixtures)
from guards import InputError

DATA = 'data/topics_byte'  # untrained's data, as prepare.py --dataset=topics --tokenizer=byte would write it
FIX = 'python prepare.py --dataset=topics --tokenizer=byte'
ROW = 33  # the SFT rows of data/sft_byte: block_size 32


def edit_meta_vocab(d):
    meta = json.loads((d / 'data' / 'tiny' / 'meta.json').read_text())
    (d / 'data' / 'tiny' / 'meta.json').write_text(json.dumps({**meta, 'tokenizer': 'gpt2', 'vocab_size': 50257,
                                                               'eot': 50256}))  # re-prepared: the other one


def short_train_bin(d):
    np.arange(10, dtype=np.uint16).tofile(d / 'data' / 'tiny' / 'train.bin')


# ---------------------------------------------------------------- a broken data file, as a process: one line
BAD = {  # name: (the folder it starts from, its change or None, script and args, words the one line must contain)
    **on(untrained, {
        'eval_jsonl_missing': (lambda d: (d / DATA / 'eval.jsonl').unlink(), EVAL,
                               [f'{DATA}/eval.jsonl', 'not found', FIX]),
        'eval_jsonl_no_usable_docs': (edit('eval.jsonl', '{"topic": "x"}\nnot json\n'), EVAL,
                                      [f'{DATA}/eval.jsonl', 'no usable documents', '2 malformed lines', FIX]),
        'meta_not_json': (edit('meta.json', '{"tokenizer": "byte", '), EVAL, [f'{DATA}/meta.json', 'not a JSON', FIX]),
        'meta_without_dtype': (edit('meta.json', json.dumps({k: v for k, v in META.items() if k != 'dtype'})), EVAL,
                               [f'{DATA}/meta.json', "lacks the key 'dtype'", FIX]),
        'train_bin_odd_size': (edit('train.bin', b'\x01\x00' * 500 + b'\x01'), (*TRAIN, '--out_dir=fresh'),
                               [f'{DATA}/train.bin', FIX]),
        'val_bin_empty': (edit('val.bin', b''), EVAL, [f'{DATA}/val.bin', 'empty', FIX]),
        'val_bin_ids_beyond_vocab': (edit('val.bin', np.array([65, 66, 300] * 100, np.uint16).tobytes()), EVAL,
                                     [f'{DATA}/val.bin', 'token id 300', 'vocab_size 257', FIX]),
        'meta_vocab_size_a_string': (edit('meta.json', json.dumps({**META, 'vocab_size': '257'})), EVAL,
                                     [f'{DATA}/meta.json', "vocab_size '257'", 'vocab_size 257', FIX]),
        'eval_dataset_unknown': (None, (*EVAL, '--dataset=nope'),
                                 ['data/nope_byte/meta.json', 'topics,shakespeare', 'check --dataset'])}),
    **on(trained, {  # (a trained run in out/, on data/tiny)
        'dataset_missing': (None, ('train.py', *TINY, '--dataset=shakespeare_byte'),
                            ['data/shakespeare_byte/meta.json', 'python prepare.py --dataset=shakespeare --tokenizer=byte']),
        'vocab_changed': (edit_meta_vocab, ('train.py', *TINY, '--init_from=resume', '--max_iters=4'),
                          ['meta.json', 'vocab_size', '50257', '257', '--dataset=tiny']),
        'data_shorter_than_block': (short_train_bin, ('train.py', *TINY), ['train.bin', '10 tokens', 'block_size']),
        'block_size_huge': (None, ('train.py', *TINY, '--block_size=100000000'), ['train.bin', 'block_size']),
        # no prepare.py command makes these (it used to suggest one)
        'dataset_unknown': (None, ('train.py', *TINY, '--dataset=nope_byte'),
                            ['data/nope_byte/meta.json', 'topics,shakespeare', 'not nope_byte', 'check --dataset'])})}


@work
def a_broken_data_file_is_one_line_error(d, case):
    return refused_run(d, *BAD[case][:3])


@pytest.mark.parametrize('case', BAD)
def test_a_broken_data_file_is_one_line_error(job, case):
    refused(job, BAD[case][3])


@work
def non_utf8_line_of_eval_jsonl_is_skipped_and_counted(d):
    untrained(d)
    good = [json.dumps({'topic': 'words', 'text': t}).encode() for t in ('one two three', 'four five')]
    (d / DATA / 'eval.jsonl').write_bytes(b'\n'.join([good[0], b'{"topic": "words", "text": "caf\xe9"}', good[1]]))
    r = run(d, *EVAL)
    return r, json.loads((d / 'out' / 'eval.json').read_text()) if r.returncode == 0 else {}


def test_non_utf8_line_of_eval_jsonl_is_skipped_and_counted(job):
    r, report = job
    assert 'skipped 1 malformed lines of eval.jsonl' in ok(r)  # it used to be read with '\ufffd' in place
    assert report['skipped_lines'] == 1 and report['eval_docs'] == 2


@work
def a_fifo_where_a_file_belongs(d):
    trained(d)
    (d / 'data' / 'tiny' / 'val.bin').unlink()
    os.mkfifo(d / 'data' / 'tiny' / 'val.bin')  # (reading it would wait for a writer forever)
    os.mkfifo(d / 'prompt')
    threading.Thread(target=lambda: (d / 'prompt').write_text('ROMEO:'), daemon=True).start()
    return run(d, *EVAL), run(d, *SAMPLE, '--start=FILE:prompt')


def test_a_fifo_where_a_file_belongs(job):
    """val.bin as a FIFO used to hang; a prompt from a pipe (FILE:/dev/stdin) was 'not found'."""
    ev, sample = job
    one_line_error(ev, 'data/tiny/val.bin is not a file')
    assert ok(sample).startswith('ROMEO:') or '\nROMEO:' in sample.stdout


@work
def a_fifo_in_the_downloads(d):
    """A FIFO where prepare.py reads a download: in --mirror, and in its cache (data/downloads)."""
    shakespeare(d)
    mirrored = d / 'mirror' / 'raw.githubusercontent.com' / SHAKESPEARE
    cached = d / 'data' / 'downloads' / mirrored.relative_to(d / 'mirror')
    cached.parent.mkdir(parents=True)
    os.mkfifo(cached)  # (reading it would wait for a writer forever; it used to be taken as missing)
    mirrored.unlink()
    os.mkfifo(mirrored)
    args = ('prepare.py', '--dataset=shakespeare', '--tokenizer=byte', '--eval_docs=6')
    return run(d, *args, '--mirror=mirror'), run(d, *args, '--base_url=http://127.0.0.1:9'), names(d / 'data')


def test_a_fifo_in_the_downloads(job):
    from_mirror, from_cache, listed = job
    for r, folder in ((from_mirror, 'mirror'), (from_cache, 'data/downloads')):
        one_line_error(r, f'{folder}/raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt'
                       ' is not a regular file', 'delete it')
    assert listed == ['downloads']  # nothing made; no download tried


@work
def run_from_another_folder_names_the_working_directory(d):
    make_data(d)
    (d / 'elsewhere').mkdir()
    return run(d / 'elsewhere', 'train.py', *TINY), d / 'elsewhere'


def test_run_from_another_folder_names_the_working_directory(job):
    r, cwd = job
    one_line_error(r, 'data/tiny/meta.json not found', f'no data/ in the working directory {cwd}')
    assert list(cwd.iterdir()) == []


# ---------------------------------------------------------------- data that does not fit the run: run here
def make_sft(root, rows=20):
    d = root / 'data' / 'sft_byte'
    d.mkdir(parents=True)
    data = np.full((rows, ROW), 256, np.uint16)
    data[:, :5] = 97
    data[:15].tofile(d / 'train.bin')
    data[15:].tofile(d / 'val.bin')
    (d / 'meta.json').write_text(json.dumps({**META, 'row': ROW}))
    (d / 'eval.jsonl').write_text(json.dumps({'topic': 'chat', 'text': 'hi', 'answer': 'yo'}) + '\n')
    return d


OPTIONS = {  # name: (change(folder) or None, script and args, words the error line must contain)
    'eval_val_shorter_than_a_row': (lambda d: (d / DATA / 'val.bin').write_bytes(b'\x01\x00' * 10), EVAL,
                                    ['val.bin has 10 tokens', 'too few for block_size 32', '--block_size']),
    'sft_rows_cut_short': (lambda d: (make_sft(d) / 'train.bin').write_bytes(b'\x01\x00' * (ROW * 3 + 5)),
                           (*TRAIN, '--dataset=sft_byte'), ['train.bin', 'not whole rows of 33']),
}


@pytest.mark.parametrize('case', OPTIONS)
def test_data_that_does_not_fit_is_one_line(case, here, monkeypatch, capsys):
    refused_here(here, *OPTIONS[case], monkeypatch, capsys)


# ---------------------------------------------------------------- every way a data file can be broken: the readers
def raised_on_purpose(e):
    """The excepthook's test (configurator.py): bad input is an InputError -> printed as one line."""
    return isinstance(e, InputError)


META_BROKEN = {'not_json': '{"tokenizer": "byte", ', 'not_utf8': b'\xff\xfe{"eot": 256}', 'empty': '',
               'not_an_object': '[257, 256]', 'a_number': '257', 'null': 'null',
               **{f'without_{k}': json.dumps({j: v for j, v in META.items() if j != k})
                  for k in META}}


@pytest.mark.parametrize('case', META_BROKEN)
def test_broken_meta_json_is_named_with_the_fix(case, tmp_path):
    d = tmp_path / 'data' / 'topics_byte'
    d.mkdir(parents=True)
    broken = META_BROKEN[case]
    (d / 'meta.json').write_bytes(broken if isinstance(broken, bytes) else broken.encode())
    with pytest.raises(ValueError) as e:
        prepare.load_meta(str(d))
    assert str(d / 'meta.json') in str(e.value) and '\n' not in str(e.value)
    assert str(e.value).endswith(f'{FIX} --data_root={tmp_path / "data"}') and raised_on_purpose(e.value)
    if case.startswith('without_'):
        assert f"lacks the key '{case[8:]}'" in str(e.value)


def test_a_data_folder_without_meta_json_names_its_fields(tmp_path):
    """train.bin and val.bin made by another program (nanoGPT's prepare writes meta.pkl): meta.json, which says how
    to read them, is named with its fields and the command that makes the folder (it was only 'not found')."""
    d = tmp_path / 'data' / 'topics_byte'
    d.mkdir(parents=True)
    np.arange(100, dtype=np.uint16).tofile(d / 'train.bin')
    with pytest.raises(InputError) as e:
        prepare.load_meta(str(d))
    for words in (f'{d / "meta.json"} not found beside its train.bin', 'JSON of tokenizer (gpt2, byte), vocab_size, '
                  'eot and dtype (uint16)', FIX):
        assert words in str(e.value), (words, str(e.value))


BIN_BROKEN = {'missing': None, 'empty': b'', 'odd_size': b'\x01\x00\x02',
              'id_beyond_vocab': np.array([1, 2, 257], np.uint16).tobytes()}


@pytest.mark.parametrize('case', BIN_BROKEN)
def test_broken_token_file_is_named_with_the_fix(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    d = make_data(tmp_path, 'topics_byte')
    (d / 'val.bin').unlink()
    if BIN_BROKEN[case] is not None:
        (d / 'val.bin').write_bytes(BIN_BROKEN[case])
    assert len(prepare.load_tokens(DATA, 'train')) > 0  # the other split is fine
    with pytest.raises(ValueError) as e:
        prepare.load_tokens(DATA, 'val')
    assert str(e.value).startswith(f'{DATA}/val.bin ') and str(e.value).endswith(FIX)
    assert '\n' not in str(e.value) and raised_on_purpose(e.value)
    if case == 'id_beyond_vocab':
        assert 'token id 257 >= vocab_size 257' in str(e.value)


GOOD = {'tokenizer': 'byte', 'vocab_size': 257, 'eot': 256, 'dtype': 'uint16'}


@pytest.mark.parametrize('meta,size,words', [
    ({**GOOD, 'vocab_size': 300}, 20, ["tokenizer 'byte', eot 256, vocab_size 300", 'byte with eot 256, vocab_size 257']),
    ({**GOOD, 'eot': 0}, 20, ['eot 0']),
    ({**GOOD, 'tokenizer': 'bpe'}, 20, ["tokenizer 'bpe'"]),
    ({**GOOD, 'dtype': 'float32'}, 20, ["dtype 'float32'", "dtype 'uint16'"]),
    ({**GOOD, 'dtype': 'uint8'}, 20, ["dtype 'uint8'", "dtype 'uint16'"]),  # (too narrow for EOT 256)
    ({**GOOD, 'vocab_size': 257.0}, 20, ['vocab_size 257.0', 'vocab_size 257']),  # not a whole number
    (GOOD, 21, ['train.bin is unusable', 'multiple']),
    ({**GOOD, 'tokenizer': ['byte']}, 20, ["tokenizer ['byte']"]),
    ({**GOOD, 'row': -5}, 20, ['row -5', 'a row 0 (sft: 2 or more)']),
])
def test_metadata_that_disagrees_with_its_data_is_named(meta, size, words, tmp_path, monkeypatch):
    """meta.json against the tokenizer it names and the token files it describes: one line, the file, the fix."""
    d = tmp_path / 'data' / 'topics_byte'
    d.mkdir(parents=True)
    (d / 'meta.json').write_text(json.dumps(meta))
    (d / 'train.bin').write_bytes(bytes(size))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as e:
        prepare.load_tokens('data/topics_byte', 'train')
    line = str(e.value)
    assert '\n' not in line and FIX in line
    for w in words:
        assert w in line, line


def test_missing_eval_jsonl_is_named_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as e:
        prepare.read_eval_docs(f'{DATA}/eval.jsonl')
    assert str(e.value).startswith(f'{DATA}/eval.jsonl not found; make it (offline: add --mirror=')
    assert str(e.value).endswith(f') with: {FIX}') and raised_on_purpose(e.value)


def test_eval_jsonl_line_that_is_not_utf8_is_counted_as_malformed(tmp_path):
    lines = [b'{"topic": "a", "text": "caf\xc3\xa9"}', b'{"topic": "a", "text": "caf\xe9"}', b'\xff\xfe',
             b'{"topic": "a", "text": "ok"}\r']
    (tmp_path / 'eval.jsonl').write_bytes(b'\n'.join(lines) + b'\n\n')
    docs, n_bad = prepare.read_eval_docs(str(tmp_path / 'eval.jsonl'))
    assert [d['text'] for d in docs] == ['caf\u00e9', 'ok'] and n_bad == 2


# ---------------------------------------------------------------- a data folder is never half-replaced
@pytest.fixture
def old_sft(tmp_path, monkeypatch):
    """data/sft_byte as an earlier prepare.py left it, and prepare's settings for a re-prepare of it."""
    d = make_sft(tmp_path)
    for key, value in dict(dataset='sft', tokenizer='byte', data_root=str(tmp_path / 'data'), block_size=16).items():
        monkeypatch.setattr(prepare, key, value)
    return d


def test_a_prepare_without_held_out_documents_keeps_the_old_data(old_sft, monkeypatch):
    before = files(old_sft)
    monkeypatch.setattr(prepare, 'sft_split', lambda: ([], [('hi', 'yo')] * 20))
    with pytest.raises(InputError, match=r'no held-out documents .*--block_size'):
        prepare.main()
    assert files(old_sft) == before
