"""The pad share of the paper's suffix (targets 193..255 of 256) on the topics' held-out documents
tokenized with GPT-2, the way eval.py packs them (pack_docs, suffix_nll's real mask), per topic:
$ export TIKTOKEN_CACHE_DIR=../shared/tiktoken
$ PYTHONPATH=. python lab/seeds/pad_gpt2.py > lab/seeds/pad_gpt2.txt
"""
import eval as ev
from prepare import get_tokenizer, read_eval_docs

encode, _, eot = get_tokenizer('gpt2')
docs, _ = read_eval_docs('data/topics_byte/eval.jsonl')
for topic in [*sorted({d['topic'] for d in docs}), 'all']:
    tokens = [encode(d['text']) for d in docs if topic in (d['topic'], 'all')]
    _, real = ev.pack_docs(tokens, eot, 256)
    pad = 1 - real[:, 193:].float().mean().item()  # targets 193..255: positions 193..255
    print(f"{topic}: {len(tokens)} documents, suffix 193..255 is {pad:.1%} padding")
