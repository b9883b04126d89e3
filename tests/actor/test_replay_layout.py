"""soft_spatial.actor.replay_layout: where a micro-batch's records go, against positions counted by
hand on a packed batch of sequences of different lengths, on both of verl's layouts; a misaligned
record is refused; ``padded`` and ``scatter_rows``."""
import pytest
import torch

from soft_spatial.actor.replay_layout import REPLAY_KEYS, ReplayState, padded, scatter_rows, trace_layout
from soft_spatial.softthink.trace import TRACE_KEYS, TRACE_PREFIX, SoftTrace, StepRecord, collate_traces


def _jagged(rows):
    return torch.nested.nested_tensor(list(rows), layout=torch.jagged)


def _micro_batch(prompts, responses, k=3, f=4):
    """verl's remove-padding micro-batch of these sequences, with their records collated: step t of
    response i soft when t is even, candidates [token, token + 1, ...], τ = 0.1 (i + 1) + 0.01 t."""
    traces = []
    for i, resp in enumerate(responses):
        n = len(resp)
        tr = StepRecord.zeros(n, k, f).record_fields()
        tr["topk_ids"][:, 0] = resp
        tr["topk_ids"][:, 1:] = resp[:, None] + torch.arange(1, k)
        tr["scores"][:] = -torch.arange(k, dtype=torch.float32)
        tr["tau"][:] = 0.1 * (i + 1) + 0.01 * torch.arange(n)
        tr["soft"][:] = torch.arange(n) % 2 == 0
        traces.append(SoftTrace(**tr))
    batch = {key: v for key, v in collate_traces(traces).items()}
    batch.update(input_ids=_jagged([torch.cat([p, r]) for p, r in zip(prompts, responses)]),
                 prompts=_jagged(prompts), responses=_jagged(responses))
    return batch


PROMPTS = [torch.tensor([1, 2, 3]), torch.tensor([4]), torch.tensor([5, 6])]
RESPONSES = [torch.tensor([10, 11]), torch.tensor([20, 21, 22, 23]), torch.tensor([30])]


@pytest.mark.parametrize("remove_padding", [True, False])
def test_every_response_step_lands_where_its_token_is(remove_padding):
    mb = _micro_batch(PROMPTS, RESPONSES)
    seq_len = max(len(p) + len(r) for p, r in zip(PROMPTS, RESPONSES))
    input_len = 11 if remove_padding else seq_len  # the packed length with static padding, or S
    sb = trace_layout(mb, remove_padding=remove_padding, input_len=input_len, temperature=0.7)
    want_rows, want_packed, want_seq = [], [], []
    start = 0
    for i, (p, r) in enumerate(zip(PROMPTS, RESPONSES)):
        for t in range(len(r)):
            pos = len(p) + t  # response token t sits after the prompt
            want_seq.append(i)
            want_packed.append(start + pos)
            want_rows.append(start + pos if remove_padding else i * seq_len + pos)
        start += len(p) + len(r)
    assert sb.seq.tolist() == want_seq and sb.embed_rows.tolist() == want_rows
    assert sb.logit_rows.tolist() == [r - 1 for r in want_rows]
    assert sb.logprob_index.tolist() == [p - 1 for p in want_packed]
    assert sb.embed_shape == ((1, input_len) if remove_padding else (3, seq_len))
    assert (sb.num_sequences, sb.nnz) == (3, start)
    tokens = torch.cat(RESPONSES)
    assert torch.equal(sb.topk_ids[:, 0], tokens)
    steps = torch.cat([torch.arange(len(r)) for r in RESPONSES])
    soft = steps % 2 == 0
    assert torch.equal(sb.soft_mask, soft)
    # discrete steps replay as [token, 0, ...] with τ = 0 and score 0, whatever was recorded
    assert torch.equal(sb.topk_ids[~soft, 1:], torch.zeros_like(sb.topk_ids[~soft, 1:]))
    assert not sb.tau[~soft].any() and not sb.scores[~soft].any()
    assert torch.allclose(sb.tau[soft], (0.1 * (torch.tensor(want_seq) + 1) + 0.01 * steps)[soft])
    assert torch.equal(sb.temperature, torch.full((len(tokens),), 0.7))


def test_a_record_whose_spine_is_not_the_response_token_is_refused():
    mb = _micro_batch(PROMPTS, RESPONSES)
    mb[TRACE_PREFIX + "topk_ids"][1, 2, 0] = 99
    with pytest.raises(ValueError, match="1 recorded spine ids differ from the response tokens"):
        trace_layout(mb, remove_padding=True, input_len=11, temperature=1.0)


def test_padded_scatter_and_the_replayed_fields():
    nested = _jagged([torch.tensor([1.0, 2.0]), torch.tensor([3.0])])
    assert torch.equal(padded(nested), torch.tensor([[1.0, 2.0], [3.0, 0.0]]))
    dense = torch.ones(2, 2)
    assert padded(dense) is dense
    out = scatter_rows((2, 3), torch.tensor([4, 0]), torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert torch.equal(out, torch.tensor([[[3.0, 4.0], [0, 0], [0, 0]], [[0, 0], [1.0, 2.0], [0, 0]]]))
    assert REPLAY_KEYS == tuple(k for k in TRACE_KEYS if k != "entropy")
    state = ReplayState(batch=None)
    assert (state.tau_upd, state.likelihood, state.hidden, state.hidden_steps) == (None,) * 4
