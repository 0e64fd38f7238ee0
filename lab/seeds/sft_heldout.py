"""Are the held-out SFT samples held out? Counts them, their answer tokens, and how many occur
verbatim in the pre-training data or share a prompt or an answer with an SFT training row:
$ PYTHONPATH=. python lab/seeds/sft_heldout.py > lab/seeds/sft_heldout.txt
"""
import collections
import numpy as np
from prepare import load_meta, read_eval_docs

held, _ = read_eval_docs('data/sft_byte/eval.jsonl')
by_topic = dict(collections.Counter(d['topic'] for d in held))
print(f"held-out samples: {len(held)}, by topic {by_topic}")
print(f"answer tokens (answer + EOT): {sum(len(d['answer'].encode()) + 1 for d in held):,}")
as_text = lambda ids: bytes(ids[ids != 256].astype(np.uint8)).decode('utf-8', 'replace')
pre_training = as_text(np.fromfile('data/topics_byte/train.bin', np.uint16))
row = load_meta('data/sft_byte')['row']
texts = set()
for split in ('train', 'val'):
    for r in np.fromfile(f'data/sft_byte/{split}.bin', np.uint16).reshape(-1, row):
        sep, end = np.flatnonzero(r == 256)[:2]
        texts |= {as_text(r[:sep]), as_text(r[sep + 1:end])}
print("in topics_byte/train.bin verbatim (prompt + newline + answer):",
      sum(d['text'] + '\n' + d['answer'] in pre_training for d in held))
print("prompt or answer also an SFT row's prompt or answer:",
      sum(d['text'] in texts or d['answer'] in texts for d in held))
