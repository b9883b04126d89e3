"""Validation generations logged with their τ per soft step (soft_spatial.integration.ppo_trainer)."""
import torch

import pytest

from soft_spatial.softthink import SoftTrace


@pytest.fixture(scope="module")
def trainer_module():
    from soft_spatial.integration.platform import use_cpu_platform

    use_cpu_platform()  # the platform must exist before verl's trainer imports
    from soft_spatial.integration import ppo_trainer
    return ppo_trainer


def _trace(taus, soft):
    n = len(taus)
    return SoftTrace(torch.zeros(n, 2, dtype=torch.long), torch.zeros(n, 2),
                     torch.tensor(taus), torch.zeros(n), torch.zeros(n, 3), torch.zeros(n),
                     torch.tensor(soft))


def test_tau_note_lists_soft_steps_in_order_and_skips_discrete_ones(trainer_module):
    tau_note = trainer_module.tau_note
    note = tau_note(_trace([0.25, 0.5, 0.875, 1.0], [True, True, True, False]))
    assert note.startswith("[3 soft steps; ")
    values = [float(v) for v in note.rstrip("]").split(":")[1].split()]
    assert values == [0.25, 0.5, 0.875]  # the discrete step's τ (1.0) is not a mixture τ
    # a round trip through the lists the rollout sends keeps the same note
    t = _trace([0.3, 0.7], [True, True])
    assert tau_note(SoftTrace.from_lists(t.to_lists())) == tau_note(t)
    assert tau_note(_trace([1.0], [False])) == "[0 soft steps; tau per soft step: ]"


def test_annotate_in_order_skips_padding_rows_and_keeps_duplicates_apart(trainer_module):
    annotate_in_order = trainer_module.annotate_in_order
    # two generated batches padded to a multiple of 2: batch 1 = a, a, b + pad "a"; batch 2 = c + pad "c"
    generated = [("a", "n1"), ("a", "n2"), ("b", "n3"), ("x", "pad"), ("c", "n4"), ("c", "pad2")]
    outputs = ["a", "a", "b", "c"]
    assert annotate_in_order(outputs, generated) == ["a\n\nn1", "a\n\nn2", "b\n\nn3", "c\n\nn4"]
    # nothing captured (e.g. a hard rollout backend without traces): the texts stay as they are
    assert annotate_in_order(outputs, []) == outputs
    # an output that no generated row matches is left alone and does not consume later rows
    assert annotate_in_order(["zz", "b"], generated) == ["zz", "b\n\nn3"]
