"""Helpers of the embedded engine's tests (tests/engines/test_local.py, test_replay.py; no tests
here): a chat prompt with an image, an output head with logit bonuses (so the random tiny policy
closes its think block, or stops, within a few steps), and the replay check of a generation."""
import torch
from PIL import Image

from soft_spatial.engines.replay import replay_completion
from soft_spatial.models import think_end_id
from soft_spatial.softthink import DensityConfig, gumbel_log_density


class BiasedHead(torch.nn.Module):
    """lm_head plus a constant bonus on some token ids (``bonus``: {id: bonus}; unlike
    tests/support/biased_head.py's, several ids and no ``weight``)."""

    def __init__(self, head, bonus):
        super().__init__()
        self.head, self.bonus = head, bonus

    def forward(self, h):
        out = self.head(h)
        for tok, b in self.bonus.items():
            out[..., tok] += b
        return out


def chat(color=(200, 30, 30), size=(64, 96), text="Which side is red? A. left B. right"):
    img = Image.new("RGB", size, color)
    return [{"role": "user", "content": [{"type": "image", "image": img},
                                         {"type": "text", "text": text}]}]


def with_think_bonus(engine, bonus=8.0):
    engine.lm_head = BiasedHead(engine.model.get_output_embeddings(),
                                {think_end_id(engine.tokenizer): bonus})
    return engine


def check_replay(eng, prompt, outs, atol, density=DensityConfig()):
    for o in outs:
        r = replay_completion(eng, prompt, o, density=density)
        soft_mask = o.trace.soft
        assert torch.equal(r["weights"], o.debug["weights"])  # bit for bit
        # fp32: cached vs uncached attention differ by rounding; 1e-5 absolute or relative
        torch.testing.assert_close(r["cand_logp"].float(), o.debug["logp"].float(), rtol=atol,
                                   atol=atol)
        d_roll = gumbel_log_density(o.trace.scores[soft_mask], o.debug["logp"][soft_mask], 1.0,
                                    density.reduce, density.clamp, density.min_logp)
        d_rep = r["loglik"][soft_mask]
        assert ((d_rep - d_roll).abs() <= atol * d_roll.abs().clamp(min=1)).all()
        # discrete steps: the replayed token log-prob is a real log-probability
        assert (r["loglik"][~soft_mask] <= 0).all()
        # the engine's own per-step likelihood (what verl gets as rollout log-probs)
        roll = torch.tensor(o.logprobs, dtype=r["loglik"].dtype)
        assert ((r["loglik"] - roll).abs() <= atol * roll.abs().clamp(min=1)).all()
