"""frontier.py: the selection exit on a hand-made case, a run that stopped early, and the whole
command on tiny models."""
import json, re, subprocess

import pytest
import torch

from harness import ENV, make_data, ok, run
import frontier


def test_selection_picks_each_tokens_first_confident_depth():
    nll = torch.tensor([[3.0, 2.0, 1.0, 4.0],    # depth 1
                        [2.5, 1.5, 0.5, 3.0],    # depth 2
                        [2.0, 1.0, 0.2, 2.0]])   # depth 3
    confident = torch.tensor([[False, True, False, False],
                              [True, True, False, False],
                              [True, False, True, False]])  # token 3: never confident -> the last depth
    chosen, depth = frontier.select(nll, confident)
    assert depth.tolist() == [2, 1, 3, 3]  # the FIRST confident depth, even if a later one is not
    assert torch.allclose(chosen, torch.tensor([2.5, 2.0, 0.2, 2.0]))


def test_frontier_command_on_tiny_models(tmp_path):
    make_data(tmp_path, 'topics_byte')
    quick = '--max_iters=2 --eval_interval=2 --n_embd=16 --block_size=32 --batch_size=2 --eval_iters=1 --device=cpu'
    r = run(tmp_path, 'frontier.py', f'--train_args={quick}', '--eval_iters=1', '--batch_size=4')
    out = ok(r)
    assert out.count('training out-cpu-') == 7  # every model, trained once
    assert not (tmp_path / 'results').exists()  # results/frontier/ is written only when asked
    table = json.loads((tmp_path / 'out-frontier' / 'frontier.json').read_text())
    assert set(table) == {'single-depth', 'multi-depth', 'random depth', 'per-token depth', 'ACT 0.001', 'ACT 0.003', 'ACT 0.01'}
    single = table['single-depth']
    assert [k for k, _, _ in single['fixed']] == list(range(1, 13))
    for policy in ('frozen maxprob', 'selection maxprob', 'frozen resid', 'selection resid'):
        assert all(1 <= depth <= 12 for _, depth, _ in single[policy]), policy
    assert set(table['ACT 0.003']) == {'ACT'}
    md = (tmp_path / 'out-frontier' / 'frontier.md').read_text()
    assert md.count('\n') == 2 + sum(len(p) for m in table.values() for p in m.values())
    svg = (tmp_path / 'out-frontier' / 'frontier.svg').read_text()
    assert svg.startswith('<svg xmlns="http://www.w3.org/2000/svg"') and svg.count('<polyline') >= 5
    again = ok(run(tmp_path, 'frontier.py', f'--train_args={quick}', '--eval_iters=1', '--batch_size=4'))
    assert 'training' not in again  # the models are there: measured, not trained again


@pytest.fixture
def trainer(tmp_path, monkeypatch):
    """frontier.train with train.py replaced: a stand-in records its arguments, exits with `rc`."""
    calls, rc = [], [0]
    monkeypatch.setattr(frontier, 'results', str(tmp_path))
    def train_py(args, **kw):
        calls.append(args)
        return subprocess.CompletedProcess(args, rc[0])
    monkeypatch.setattr(frontier.subprocess, 'run', train_py)
    return calls, rc


def save_run(out_dir, iter_num, max_iters):  # the keys of a checkpoint that frontier.train reads
    out_dir.mkdir()
    torch.save(dict(iter_num=iter_num, config=dict(max_iters=max_iters)), out_dir / 'ckpt.pt')


def test_a_run_that_stopped_early_is_resumed_not_measured(trainer, tmp_path, capsys):
    calls, _ = trainer
    save_run(tmp_path / 'half', 51, 1500)  # Ctrl-C at iter 51 of 1,500
    frontier.train(str(tmp_path / 'half'), ['config/cpu_single.py'])
    assert len(calls) == 1 and calls[0][-1] == '--init_from=resume'
    out = capsys.readouterr().out
    assert f"resuming {tmp_path / 'half'} (it stopped at iter 51 of 1500)" in out
    save_run(tmp_path / 'done', 1500, 1500)
    frontier.train(str(tmp_path / 'done'), ['config/cpu_single.py'])
    assert len(calls) == 1  # a finished run is measured as it is


def test_a_failed_training_is_one_line(trainer, tmp_path):
    calls, rc = trainer
    rc[0] = 130  # stopped with Ctrl-C
    with pytest.raises(ValueError, match=r'training .*new failed \(exit 130\): see .*_new\.log'):
        frontier.train(str(tmp_path / 'new'), ['config/cpu_single.py'])
