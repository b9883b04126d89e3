"""The embedded soft-decoding engine (pure PyTorch + transformers).

Decoding of one batch (docs/design.md §1, §2.1–2.5, §3):

1. prompts are rendered with the chat template (images through the processor), left-padded and
   prefilled **once per prompt**; the KV cache is then repeated for the n samples of each prompt;
2. at every step the final hidden state h and the logits ℓ of the last position are computed;
   rows still thinking take a soft step (Gumbel top-K, τ fixed or from AdaptSoft, the spine is the
   emitted token, the next input is the mixture Σ w_k E[ids_k]); rows whose spine has emitted
   ``</think>`` (that step itself is soft) and every row in ``hard`` mode sample discretely;
3. each step's record is appended once (:class:`~soft_spatial.softthink.TraceRecorder`); finished
   rows leave the batch (their KV is dropped).

Positions are explicit (M-RoPE aware, :mod:`soft_spatial.models.rope`), so cached decoding equals an
uncached forward. Each row's noise is a function of its seed — from its prompt's seed
(``seeds[i]``, default ``seed + i``) and its sample index — and the step alone
(:func:`~soft_spatial.softthink.noise.noise_uniforms`, §2.2), so it does not depend on the rest of
the batch.
"""
from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import torch
from torch import Tensor

from soft_spatial.engines.base import (FINISH_LENGTH, FINISH_STOP, Completion, Prompt, check_prompt_ids,
                                       progress_bar, prompt_limit, prompt_seeds, think_end_index,
                                       think_end_token)
from soft_spatial.engines.prompts import load_image, render_chat
from soft_spatial.engines.step import sample_step
from soft_spatial.models.loading import load_model
from soft_spatial.models.rope import decode_position_ids, is_mrope, mm_token_types, prefill_position_ids
from soft_spatial.models.tokens import stop_token_ids, unusable_token_ids
from soft_spatial.softthink import (
    AdaptSoft,
    AdaptSoftConfig,
    ControllerState,
    DensityConfig,
    SamplingConfig,
    SoftThinkingConfig,
    StepRecord,
    TraceRecorder,
    record_input_embeddings,
)
from soft_spatial.softthink.logits import head_logits
from soft_spatial.softthink.noise import noise_uniforms, row_seed, seed_tensor

__all__ = ["LocalEngine"]


@dataclass
class _Prepared:
    """One rendered prompt: token ids and its processor tensors (images), unbatched."""

    ids: list[int]
    mm: dict[str, Tensor]


class _Timer:
    """Accumulates wall time per phase (for scripts/bench_decode.py); no-op when disabled. On a
    CUDA device each phase synchronises first and last, so the time is the phase's own work."""

    def __init__(self, enabled: bool, device: torch.device = torch.device("cpu")):
        self.enabled, self.totals = enabled, defaultdict(float)
        self.sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    @contextlib.contextmanager
    def __call__(self, name: str):
        if not self.enabled:
            yield
            return
        self.sync()
        t0 = time.perf_counter()
        yield
        self.sync()
        self.totals[name] += time.perf_counter() - t0


@dataclass
class _RowState:
    """One generated row of a chunk while it decodes (nanochat's one state object per row)."""

    prompt: int
    """Index of its prompt in the chunk."""
    sample: int
    """Its sample index among the prompt's n."""
    length: int = 0
    """Steps generated so far."""
    finish: str = FINISH_LENGTH
    """Why it ended: the length limit until it emits an end-of-sequence token."""


def _every_row(rec: StepRecord, active: Tensor, rows: int, k: int, fdim: int,
               debug: bool) -> StepRecord:
    """The live rows' step ``rec`` placed at rows ``active`` of ``rows`` zero rows (finished
    rows hold zeros past their length)."""
    full = StepRecord.zeros(rows, k, fdim, active.device, debug)
    for f in fields(StepRecord):
        if getattr(rec, f.name) is not None:
            getattr(full, f.name)[active] = getattr(rec, f.name)
    return full


class LocalEngine:
    """Batched soft/hard decoding with a KV cache, on any device PyTorch runs on.

    Args:
        model: a transformers model with ``.model`` (the base model returning
            ``last_hidden_state``) and an output embedding (Qwen3-VL, Qwen2.5-VL, causal LMs).
        tokenizer, processor: from the same directory (processor None for text-only models).
        controller: an :class:`AdaptSoft` for ``mode="adaptsoft"`` (or set it later).
        max_batch_rows: rows (prompts × n) decoded together.
        max_prompt_length: longest accepted prompt in tokens (default: the model's context
            length minus ``max_new_tokens``).
    """

    def __init__(self, model, tokenizer, processor=None, controller: ControllerState | None = None,
                 eos_ids: Sequence[int] | None = None, max_batch_rows: int = 64,
                 max_prompt_length: int | None = None, name: str = "model"):
        self.model, self.tokenizer, self.processor = model, tokenizer, processor
        self.name = name
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.base = model.model
        self.embed = model.get_input_embeddings()
        self.lm_head = model.get_output_embeddings()
        self.mrope = is_mrope(model)
        cfg = getattr(model.config, "text_config", model.config)
        self.hidden_size = cfg.hidden_size
        self.context_length = getattr(cfg, "max_position_embeddings", None)
        self.eos_ids = list(eos_ids) if eos_ids else stop_token_ids(
            model.config, tokenizer, getattr(model, "generation_config", None))
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.image_token_id = getattr(model.config, "image_token_id", None)
        if max_batch_rows < 1:
            raise ValueError(f"max_batch_rows must be >= 1 (rows decoded together), got {max_batch_rows}")
        self.max_batch_rows, self.max_prompt_length = max_batch_rows, max_prompt_length
        self.banned_ids = torch.tensor(  # never sampled: see models.tokens.unusable_token_ids
            unusable_token_ids(model.config, tokenizer, self.lm_head.weight.shape[0]),
            dtype=torch.long, device=self.device)
        self.controller: AdaptSoft | None = None
        if controller is not None:
            self.set_controller(controller)
        self.timings = _Timer(False)

    # -- construction and weights -------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | Path, device="cpu", dtype=torch.float32,
                        controller: ControllerState | None = None, **kwargs) -> "LocalEngine":
        """Load a local model directory (no downloads); ``controller`` as in :meth:`set_controller`
        (a checkpoint: :meth:`AdaptSoft.read_checkpoint`)."""
        model, processor, tokenizer = load_model(path, device=device, dtype=dtype)
        engine = cls(model, tokenizer, processor, name=str(path), **kwargs)
        if controller is not None:
            engine.set_controller(controller)
        return engine

    @torch.no_grad()
    def update_weights(self, state_dict: dict[str, Tensor]) -> None:
        """Copy (a subset of) policy weights in, e.g. after an actor update. Unknown names raise."""
        own = self.model.state_dict()
        unknown = sorted(k for k in state_dict if k not in own)
        if unknown:
            raise KeyError(f"update_weights: {len(unknown)} names are not parameters of "
                           f"{self.name}, e.g. {unknown[:3]}")
        for k, v in state_dict.items():
            if own[k].shape != v.shape:
                raise ValueError(f"update_weights: {k} has shape {tuple(v.shape)}, expected "
                                 f"{tuple(own[k].shape)}")
            own[k].copy_(v.to(own[k].device, own[k].dtype))

    def set_controller(self, controller: ControllerState | None) -> None:
        """Install AdaptSoft's state (loaded into the current controller when that one was built
        the same way, else into a new one; a module's is :meth:`AdaptSoft.to_state`, a
        checkpoint's :meth:`AdaptSoft.read_checkpoint`), or remove it (None): the one form every
        engine takes (:class:`~soft_spatial.engines.base.Engine`)."""
        if controller is None:
            self.controller = None
            return
        if not isinstance(controller, ControllerState):
            raise TypeError(f"set_controller takes a ControllerState (AdaptSoft.to_state(), "
                            f"AdaptSoft.read_checkpoint(path)) or None, got {type(controller).__name__}")
        controller = AdaptSoft.from_state(controller, into=self.controller)
        if controller.hidden_size != self.hidden_size:
            raise ValueError(f"AdaptSoft was built for hidden size {controller.hidden_size}, "
                             f"{self.name} has {self.hidden_size}")
        self.controller = controller.to(self.device).float().eval()

    def close(self) -> None:
        """Nothing to release: the model lives in this process and goes with the engine."""

    def enable_timing(self, enabled: bool = True) -> dict[str, float]:
        """Accumulate wall time per decoding phase (prefill, sample, mixture, forward) in the
        returned dict (used by scripts/bench_decode.py); resets the totals."""
        self.timings = _Timer(enabled, self.device)
        return self.timings.totals

    @property
    def feature_dim(self) -> int:
        return self.controller.feature_dim if self.controller else AdaptSoftConfig().proj_dim + 1

    # -- prompts ------------------------------------------------------------------------------
    def _prepare(self, i: int, prompt: Prompt, limit: int) -> _Prepared:
        if isinstance(prompt, dict):
            p = self._prepare_ids_with_images(i, prompt)
        elif len(prompt) and isinstance(prompt[0], dict):
            p = self._prepare_chat(i, prompt)
        elif all(isinstance(t, int) for t in prompt):
            ids = list(prompt)
            if self.image_token_id is not None and self.image_token_id in ids:
                raise ValueError(f"prompt {i}: token ids contain image tokens but no image was "
                                 f"given; pass a chat prompt with its images instead")
            p = _Prepared(ids, {})
        else:
            raise TypeError(f"prompt {i}: expected a list of chat messages or of token ids")
        check_prompt_ids(i, p.ids, limit, self.context_length, self.max_prompt_length)
        return p

    def _prepare_ids_with_images(self, i: int, prompt: dict) -> _Prepared:
        """``{"prompt_ids": [...], "images": [...]}``: ids already rendered by a chat template
        with expanded image placeholders (what verl's agent loop sends)."""
        if "prompt_ids" not in prompt:
            raise ValueError(f"prompt {i}: a dict prompt needs 'prompt_ids'")
        ids = [int(t) for t in prompt["prompt_ids"]]
        images = [load_image(img, i) for img in prompt.get("images") or []]
        n_pad = sum(1 for t in ids if t == self.image_token_id)
        if not images:
            if n_pad:
                raise ValueError(f"prompt {i}: {n_pad} image placeholder tokens but no image")
            return _Prepared(ids, {})
        if self.processor is None:
            raise ValueError(f"prompt {i} has images but {self.name} is a text-only model")
        enc = self.processor.image_processor(images=images, return_tensors="pt")
        merge = getattr(self.processor.image_processor, "merge_size", 2)
        expected = int(enc["image_grid_thw"].prod(-1).sum()) // (merge * merge)
        if expected != n_pad:
            raise ValueError(f"prompt {i}: {len(images)} image(s) need {expected} placeholder "
                             f"tokens, the prompt ids have {n_pad}")
        types = mm_token_types(torch.tensor([ids]), self.model.config)
        return _Prepared(ids, {"pixel_values": enc["pixel_values"],
                               "image_grid_thw": enc["image_grid_thw"], "mm_token_type_ids": types})

    def _prepare_chat(self, i: int, messages) -> _Prepared:
        ids, _, mm = render_chat(messages, i, self.tokenizer, self.processor,
                                 self.image_token_id, self.name)
        return _Prepared(ids, mm)

    def _batch(self, prepared: list[_Prepared]):
        n = max(len(p.ids) for p in prepared)
        ids = torch.full((len(prepared), n), self.pad_id, dtype=torch.long)
        mask = torch.zeros(len(prepared), n, dtype=torch.long)
        for r, p in enumerate(prepared):
            ids[r, n - len(p.ids):] = torch.tensor(p.ids)
            mask[r, n - len(p.ids):] = 1
        mm: dict[str, Tensor] = {}
        if any(p.mm for p in prepared):
            for key in ("pixel_values", "image_grid_thw"):
                parts = [p.mm[key] for p in prepared if key in p.mm]
                if parts:
                    mm[key] = torch.cat(parts)
            mm["mm_token_type_ids"] = torch.zeros_like(ids, dtype=torch.int32)
            for r, p in enumerate(prepared):
                if "mm_token_type_ids" in p.mm:
                    mm["mm_token_type_ids"][r, n - len(p.ids):] = p.mm["mm_token_type_ids"][0]
        dev = self.device
        mm = {k: (v.to(dev, self.dtype) if v.is_floating_point() else v.to(dev))
              for k, v in mm.items()}
        return ids.to(dev), mask.to(dev), mm

    # -- decoding -----------------------------------------------------------------------------
    def _step_outputs(self, out, fp32_logits: bool = False):
        h = out.last_hidden_state[:, -1]
        logits = head_logits(self.lm_head, h, fp32_logits)
        if self.banned_ids.numel():
            logits = logits.index_fill(-1, self.banned_ids, float("-inf"))
        return h, logits

    @torch.no_grad()
    def generate(self, prompts: Sequence[Prompt],
                 soft_thinking: SoftThinkingConfig | None = None,
                 sampling: SamplingConfig | None = None, n: int = 1, seed: int = 0,
                 seeds: Sequence[int] | None = None, progress: bool = False,
                 debug: bool = False, density: DensityConfig | None = None) -> list[Completion]:
        """Sample ``n`` responses per prompt. Returns completions ordered prompt-major
        (prompt i's samples at ``i*n .. i*n+n-1``).

        ``density`` is the soft-step likelihood each completion's ``loglik`` records (the run's
        ``SoftSettings.density``; None: the exact density, eq. 5), and with ``fp32_logits`` the
        head's product is computed in fp32 (sampling and records alike).

        ``seeds`` gives each prompt its own seed (default ``seed + i``); row (i, j) uses
        ``row_seed(seeds[i], j)``, so prompt i run alone with ``seeds=[seeds[i]]`` decodes the
        same. ``debug`` keeps per-step mixture weights and candidate log-probs.
        """
        soft_thinking = soft_thinking or SoftThinkingConfig()
        sampling = sampling or SamplingConfig()
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if soft_thinking.mode == "adaptsoft" and self.controller is None:
            raise ValueError("mode 'adaptsoft' needs a controller: pass controller= or call "
                             "set_controller()")
        think_end = think_end_token(self.tokenizer, soft_thinking)
        limit = prompt_limit(self.max_prompt_length, self.context_length, sampling)
        prepared = [self._prepare(i, p, limit) for i, p in enumerate(prompts)]
        seeds = prompt_seeds(len(prompts), seed, seeds)
        per_chunk = max(1, self.max_batch_rows // n)
        chunks = [list(range(s, min(s + per_chunk, len(prompts))))
                  for s in range(0, len(prompts), per_chunk)]
        outs: list[Completion] = []
        with progress_bar(progress, len(prompts) * n, "generate") as advance:
            for chunk in chunks:
                outs += self._generate_chunk(chunk, [prepared[i] for i in chunk],
                                             soft_thinking, sampling,
                                             n, [seeds[i] for i in chunk], think_end, debug,
                                             density)
                advance(len(chunk) * n)
        return outs

    def _generate_chunk(self, prompt_idx, prepared, soft_thinking, sampling, n, seeds, think_end,
                        debug, density=None):
        tm = self.timings
        k, fdim, dev = soft_thinking.top_k, self.feature_dim, self.device
        # 1. Prefill: one forward per prompt, shared by its n samples.
        ids, mask, mm = self._batch(prepared)
        fp32 = density is not None and density.fp32_logits
        with tm("prefill"):
            pos, deltas = prefill_position_ids(self.model, ids, mask, **mm)
            out = self.base(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True,
                            **mm)
            h, logits = self._step_outputs(out, fp32)
        cache = out.past_key_values
        if n > 1:
            cache.batch_repeat_interleave(n)
            h, logits = h.repeat_interleave(n, 0), logits.repeat_interleave(n, 0)
            mask, deltas = mask.repeat_interleave(n, 0), deltas.repeat_interleave(n, 0)
        # 2. One state object per generated row; the batch holds the live rows (``active``: the
        # original row of each), the recorder every row's records.
        rows = [_RowState(prompt=r // n, sample=r % n) for r in range(len(prepared) * n)]
        row_seeds = seed_tensor([row_seed(seeds[r.prompt], r.sample) for r in rows], dev)
        thinking = torch.full((len(rows),), soft_thinking.is_soft, dtype=torch.bool, device=dev)
        active = torch.arange(len(rows), device=dev)
        recorder = TraceRecorder()
        dbg = defaultdict(list)
        loglik: list[Tensor] = []
        for step in range(sampling.max_new_tokens):
            b = active.numel()
            # 3. Sample the live rows' step (the uniforms are the row's own: seed and step).
            with tm("sample"):
                u = noise_uniforms(row_seeds[active], step, k + 1)
                rec = sample_step(logits, h, u, thinking[active], soft_thinking, sampling,
                                  self.controller, fdim, debug, density)
            token = rec.tokens
            # 4. Record it for every row (finished rows hold zeros past their length).
            full = _every_row(rec, active, len(rows), k, fdim, debug)
            recorder.record(full)
            loglik.append(full.loglik)
            if debug:
                dbg["weights"].append(full.weights.cpu())
                dbg["logp"].append(full.logp.cpu())
            # 5. Each live row's state: its length, whether it stopped; soft rows that emitted
            # </think> decode discretely from the next step.
            done = self._advance(rows, active, token, step)
            if think_end is not None and soft_thinking.is_soft:
                thinking[active] &= token != think_end  # the </think> step itself was soft
            if step + 1 == sampling.max_new_tokens:
                break
            keep = (~done).nonzero().squeeze(-1)
            if keep.numel() == 0:
                break
            # 6. The next inputs: each row's recorded mixture (or token); stopped rows leave.
            with tm("mixture"):
                nxt = record_input_embeddings(self.embed.weight, rec.topk_ids, rec.scores,
                                              rec.tau, rec.soft)
            if keep.numel() < b:
                cache.batch_select_indices(keep)
                active, nxt = active[keep], nxt[keep]
                mask, deltas = mask[keep], deltas[keep]
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
            # 7. One decode forward of the live rows.
            with tm("forward"):
                pos = decode_position_ids(mask, deltas, self.mrope)
                out = self.base(inputs_embeds=nxt[:, None].to(self.dtype), attention_mask=mask,
                                position_ids=pos, past_key_values=cache, use_cache=True)
                h, logits = self._step_outputs(out, fp32)
                cache = out.past_key_values
        return self._completions(prompt_idx, prepared, rows, recorder, loglik, dbg, think_end,
                                 debug)

    def _advance(self, rows: list["_RowState"], active: Tensor, token: Tensor,
                 step: int) -> Tensor:
        """Each live row's length after ``step``, and whether it stopped (an end-of-sequence
        token): the stopped rows' mask ``[b]``."""
        done = torch.zeros(active.numel(), dtype=torch.bool, device=active.device)
        for j, (r, tok) in enumerate(zip(active.tolist(), token.tolist())):
            row = rows[r]
            row.length = step + 1
            if tok in self.eos_ids:
                row.finish, done[j] = FINISH_STOP, True
        return done

    def _completions(self, prompt_idx, prepared, rows, recorder, loglik, dbg, think_end,
                     debug) -> list[Completion]:
        """One completion per row, cut to its length."""
        traces = recorder.build([row.length for row in rows])
        loglik_all = torch.stack(loglik, 1).cpu()
        results = []
        for r, row in enumerate(rows):
            toks = traces[r].tokens.tolist()
            c = Completion(prompt_index=prompt_idx[row.prompt], sample_index=row.sample,
                           prompt_ids=list(prepared[row.prompt].ids), token_ids=toks,
                           text=self.tokenizer.decode(toks, skip_special_tokens=True),
                           trace=traces[r], finish_reason=row.finish,
                           think_end=think_end_index(toks, think_end),
                           logprobs=loglik_all[r, : row.length].tolist())
            if debug:
                c.debug = {key: torch.stack(v, 1)[r, : row.length] for key, v in dbg.items()}
            results.append(c)
        return results
