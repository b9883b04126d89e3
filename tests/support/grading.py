"""What the grading rule's property tests share: Hypothesis settings, a question's options, the
option letters and the answer credit a response earns."""
from hypothesis import settings
from hypothesis import strategies as st

from soft_spatial.data.reward import compute_score

PROPERTY = settings(max_examples=150, deadline=None, derandomize=True)
OPTIONS = ["left", "right", "in front", "behind"]
EXTRA = {"options": OPTIONS}
LETTER = st.sampled_from("ABCD")


def credit(response: str, gold: str) -> float:
    """The answer credit (0 or 1) of ``response`` for an OmniSpatial question whose gold is ``gold``."""
    return compute_score("omnispatial", response, gold, EXTRA)["acc"]
