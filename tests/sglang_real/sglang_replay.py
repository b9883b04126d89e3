"""A stand-in for SGLang's scheduler, detokenizer and tokenizer manager, for a fixed set of
requests whose logits and hidden states were recorded from the local engine.

Real SGLang pieces: ``GenerateReqInput`` (normalised and split like the tokenizer manager does),
``SamplingParams`` built from each request's sampling parameters (``custom_params`` included),
``Req`` objects, and ``BatchTokenIDOutput`` batches carrying each request's new output ids and
``customized_info`` slice every ``interval`` steps, handed to ``tm._handle_batch_output`` (which
``soft_spatial.compat.sglang.collect_records`` wraps). The handler keeps, like SGLang's, only the newest slice in
``meta_info``. The plugin's own :class:`SoftRuntime` samples every step and builds the next
step's input embeddings, which are checked against the local engine's at every step.
"""
from __future__ import annotations

import asyncio
import dataclasses
from collections import defaultdict
from types import SimpleNamespace
from collections.abc import Callable, Sequence

import torch
from sglang.srt.managers.io_struct import BatchTokenIDOutput
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.sampling.sampling_params import SamplingParams

__all__ = ["ReplayTokenizerManager", "ReplayEngine", "batch_output"]


def batch_output(rids, output_ids, finished, info) -> BatchTokenIDOutput:
    """A real BatchTokenIDOutput with the fields the tokenizer side reads here (others None)."""
    kw = {f.name: [None] * len(rids) for f in dataclasses.fields(BatchTokenIDOutput)
          if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    kw.update(output_ids=output_ids, finished_reasons=finished, customized_info=info)
    return BatchTokenIDOutput(rids=list(rids), **kw)


class ReplayTokenizerManager:
    """``generate_request`` / ``_handle_batch_output`` of SGLang's TokenizerManager, served by a
    replay of the recorded steps once every request in ``order`` has arrived.

    ``runtime()`` returns the plugin's SoftRuntime; ``embed`` is the embedding module;
    ``eos_ids`` end a row (SGLang's stop tokens); rows are the local engine's, in ``order``
    (request ids), or, when ``order`` is a number, the first that many requests in arrival order.
    """

    def __init__(self, steps, mixes, order: Sequence[str], runtime: Callable, embed, eos_ids,
                 interval: int = 3):
        self.steps, self.mixes = steps, mixes
        self.expected = order if isinstance(order, int) else len(order)
        self.order = [] if isinstance(order, int) else list(order)
        self._arrival = isinstance(order, int)
        self.runtime, self.embed, self.eos_ids = runtime, embed, set(eos_ids)
        self.interval = interval
        self.rid_to_state, self.reqs = {}, {}
        self.sent_batches = 0
        self.server_status = None

    async def generate_request(self, obj, request=None):
        obj.normalize_batch_and_arguments()
        if obj.is_single:
            yield await self._one(obj)
        else:
            yield list(await asyncio.gather(*(self._one(obj[i]) for i in range(obj.batch_size))))

    async def _one(self, obj):
        if obj.sampling_params.get("max_new_tokens") == 0:  # prefill only: SGLang answers at once
            return {"output_ids": [], "meta_info": {"id": obj.rid,
                                                    "finish_reason": {"type": "length"}}}
        state = SimpleNamespace(event=asyncio.Event(), output_ids=[], out=None)
        self.rid_to_state[obj.rid] = state
        req = Req(obj.rid, "", list(obj.input_ids), SamplingParams(**obj.sampling_params))
        req.req_pool_idx = len(self.reqs)  # the scheduler's request-pool slot
        self.reqs[obj.rid] = req
        if self._arrival:
            self.order.append(obj.rid)
        if len(self.reqs) == self.expected:
            assert sorted(self.reqs) == sorted(self.order)
            await self._replay()
        await state.event.wait()
        return state.out

    async def _handle_batch_output(self, recv_obj):
        for i, rid in enumerate(recv_obj.rids):
            state = self.rid_to_state[rid]
            state.output_ids.extend(recv_obj.output_ids[i])
            meta = {"id": rid, "finish_reason": recv_obj.finished_reasons[i]}
            for k, v in (recv_obj.customized_info or {}).items():
                meta[k] = v[i]  # SGLang: only the newest slice survives
            if recv_obj.finished_reasons[i] is not None:
                state.out = {"output_ids": state.output_ids.copy(), "meta_info": meta}
                del self.rid_to_state[rid]
                state.event.set()

    async def _replay(self):
        reqs: list[Req] = [self.reqs[r] for r in self.order]
        rt = self.runtime()
        active = list(range(len(reqs)))
        sent = [0] * len(reqs)
        infos = [defaultdict(list) for _ in reqs]
        for t, (logits, h, rec) in enumerate(self.steps):
            batch = [reqs[r] for r in active]
            tokens, info = rt.sample(batch, logits, h)
            assert torch.equal(tokens, rec["topk_ids"][:, 0]), t
            finished = {}
            for j, r in enumerate(active):
                tok = int(tokens[j])
                reqs[r].output_ids.append(tok)
                for k, v in info.items():
                    infos[r][k].append(v[j])
                if tok in self.eos_ids:
                    finished[r] = {"type": "stop", "matched": tok}
                elif len(reqs[r].output_ids) >= reqs[r].sampling_params.max_new_tokens:
                    finished[r] = {"type": "length", "length": len(reqs[r].output_ids)}
            if t < len(self.mixes):  # next-step inputs: the local engine's mixtures
                plain = self.embed(tokens)
                slots = torch.tensor([r.req_pool_idx for r in batch])
                got = rt.decode_inputs(slots, self.embed, plain)
                got = plain if got is None else got
                assert torch.equal(got, self.mixes[t].to(got.dtype)), t
            emit = [r for r in active if r in finished or (t + 1) % self.interval == 0]
            if emit:
                out = batch_output(
                    [reqs[r].rid for r in emit],
                    [reqs[r].output_ids[sent[r]:] for r in emit],
                    [finished.get(r) for r in emit],
                    {k: [infos[r][k][sent[r]:] for r in emit] for k in info})
                for r in emit:
                    sent[r] = len(reqs[r].output_ids)
                await self._handle_batch_output(out)
                self.sent_batches += 1
            active = [r for r in active if r not in finished]
        assert not active, "the recorded steps ended before every row finished"


class ReplayEngine:
    """SGLang's offline ``Engine.generate`` (batch form) over a ReplayTokenizerManager."""

    def __init__(self, tokenizer_manager: ReplayTokenizerManager):
        self.tokenizer_manager = tokenizer_manager
        self.calls = []

    def generate(self, **kwargs):
        from sglang.srt.managers.io_struct import GenerateReqInput
        self.calls.append(kwargs)
        obj = GenerateReqInput(**kwargs)

        async def run():
            return await self.tokenizer_manager.generate_request(obj, None).__anext__()

        return asyncio.run(run())

    def shutdown(self):
        raise AssertionError("an injected backend must not be shut down by SGLangEngine")
