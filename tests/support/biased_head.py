"""An output layer that makes the spine close its think block within a few steps."""
from torch import nn


class BiasedHead(nn.Module):
    """Output layer with a logit bonus on </think>, so the spine emits it within a few steps."""

    def __init__(self, head, tok, bonus):
        super().__init__()
        self.head, self.tok, self.bonus = head, tok, bonus
        self.weight = head.weight

    def forward(self, h):
        out = self.head(h)
        out[..., self.tok] += self.bonus
        return out
