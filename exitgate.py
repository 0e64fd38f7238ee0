"""
Ouro's learned exit distribution as a training objective (model.py's GPT.objective uses it when
config.exit_gate): with exit_beta = 10 the distribution stays uniform and its gradient, reaching
the states in the first 100 steps (train.py --gate_detached), is nanoloop's best recipe at d=64
(RESULTS.md, "What makes the exit gate's model train better"; config/cpu_gate_aid.py).
"""
import torch
import torch.nn as nn

class ExitGate(nn.Module):
    """Ouro's learned exit. At each supervised depth t but the last a gate gives each token
    lambda_t, its chance to stop there if it has not before: the exit distribution is
        p_t = lambda_t * prod_(j<t) (1 - lambda_j),  the last depth taking what remains.
    Training: loss = sum_t p_t NLL_t - beta * H(p), per token (uniform p: multi-depth loss)."""
    def __init__(self, c):
        super().__init__()
        self.c = c
        # lambda = 0.5 everywhere at the start; zeros, drawing no random number (seed s gives the
        # same other weights as the model without the gate)
        self.gate = nn.utils.skip_init(nn.Linear, c.n_embd, 1)
        nn.init.zeros_(self.gate.weight)
        nn.init.zeros_(self.gate.bias)
        self.detached = False  # True (train.py gate_detached): its gradient stops at the gate

    def distribution(self, states):
        """The states at every supervised depth but the last -> p (depths, B, T), 1 per token."""
        p, survive = [], 1.0  # survive: the chance that a token has not stopped yet
        for z in states:  # lam: each token's chance to stop at this state, if still running
            lam = torch.sigmoid(self.gate(z.detach() if self.detached else z).float()).squeeze(-1)
            p.append(survive * lam)
            survive = survive * (1 - lam)
        return torch.stack(p + [survive])

    def loss(self, states, nlls, mask):
        """nlls (depths, B, T): each token's NLL at every supervised depth; mask: real targets."""
        p = self.distribution(states)
        expected = (p * nlls).sum(0)
        entropy = -(p * p.clamp_min(1e-12).log()).sum(0)
        per_token = expected - self.c.exit_beta * entropy
        return (per_token * mask).sum() / mask.sum()
