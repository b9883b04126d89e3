"""The soft agent loop (`soft_spatial.rollout.agent_loop`) run directly over verl's single-turn loop
with a stand-in server: the row's noise key reaches the server in the sampling params, and the
SoftTrace stays aligned with the response verl keeps (cut to ``response_length``), or the loop
fails naming what is missing."""
import asyncio

import numpy as np
import pytest

from soft_spatial.softthink.noise import NOISE_KEY, NOISE_PARAM, NOISE_ROWS, noise_param
from soft_spatial.softthink.trace import TRACE_FIELD

RESPONSE_LENGTH = 5


class Server:
    """verl's server manager: answers every request with ``n`` tokens and ``records`` records."""

    def __init__(self, n, records, trace=True):
        self.n, self.records, self.trace, self.requests = n, records, trace, []

    async def generate(self, **request):
        from verl.workers.rollout.replica import TokenOutput

        self.requests.append(request)
        trace = {"topk_ids": [[i, i + 1] for i in range(self.records)], "tau": [0.1 * i for i in range(self.records)]}
        return TokenOutput(token_ids=list(range(100, 100 + self.n)), log_probs=[-0.5] * self.n,
                           extra_fields={TRACE_FIELD: trace} if self.trace else {})


@pytest.fixture(scope="module")
def tokenizer(tiny_qwen3_vl_small):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_qwen3_vl_small)


def run(tokenizer, server, sampling, **row):
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap

    from soft_spatial.rollout.agent_loop import SoftThinkingAgentLoop

    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 64,
                                                                 "response_length": RESPONSE_LENGTH}}})

    async def main():  # verl's loop binds the running event loop when it is built
        loop = SoftThinkingAgentLoop(DictConfigWrap(config), server, tokenizer, None, None,
                                     DictConfigWrap(OmegaConf.create({})))
        return await loop.run(sampling, raw_prompt=[{"role": "user", "content": "Where is the cup?"}], **row)

    return asyncio.run(main())


@pytest.mark.parametrize("n", [RESPONSE_LENGTH + 3, RESPONSE_LENGTH, 2])
def test_the_trace_keeps_one_record_per_kept_response_token_and_the_key_reaches_the_server(tokenizer, n):
    server, sampling = Server(n, n), {"temperature": 1.0}
    out = run(tokenizer, server, sampling, **{NOISE_KEY: "train2.0/7", NOISE_ROWS: 16})
    kept = min(n, RESPONSE_LENGTH)
    assert out.response_ids == list(range(100, 100 + kept))
    assert out.extra_fields[TRACE_FIELD] == {"topk_ids": [[i, i + 1] for i in range(kept)],
                                             "tau": [0.1 * i for i in range(kept)]}
    (request,) = server.requests
    assert request["sampling_params"] == {"temperature": 1.0, **noise_param("train2.0/7", 16)}
    assert sampling == {"temperature": 1.0}  # the caller's params are not changed
    run(tokenizer, server, sampling)  # a row without a key: verl's params as they are
    assert server.requests[1]["sampling_params"] == sampling


def test_a_missing_or_short_trace_fails_naming_it(tokenizer):
    with pytest.raises(RuntimeError, match="3 records for 5 response tokens"):
        run(tokenizer, Server(7, 3), {})
    with pytest.raises(RuntimeError, match=f"returned no '{TRACE_FIELD}'.*rollout.name=local_soft"):
        run(tokenizer, Server(4, 4, trace=False), {})


def test_agent_loop_sends_the_rows_noise_key():
    from soft_spatial.rollout.agent_loop import with_noise_key

    params = {"temperature": 1.0}
    row = {NOISE_KEY: "train3.0/17", NOISE_ROWS: np.int64(256), "raw_prompt": []}
    assert with_noise_key(params, row) == {"temperature": 1.0,
                                           NOISE_PARAM: {"key": "train3.0/17", "rows": 256}}
    assert params == {"temperature": 1.0}  # not modified
    assert with_noise_key(params, {"raw_prompt": []}) is params
