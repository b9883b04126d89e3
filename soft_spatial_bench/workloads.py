"""Workloads shared by the benchmarks (``scripts/bench_*.py``) and the actor tests, and the
timing statistics of the benchmarks.

* verl-shaped actor batches from `LocalEngine` soft rollouts of a tiny model (`rollouts`,
  `verl_batch`, `train_batch_td`) and real verl FSDP2 engines on gloo (`make_train_engine`);
* `random_controller`: an AdaptSoft with random weights, so τ varies by step;
* `interleaved` and `Timing`: modes measured in turns across repeats (so a slow spell of a shared
  machine hits every mode alike), each timing summarised by min, median and spread;
  `calls_for` and `mean_seconds`: enough calls per measurement that it dominates timer noise;
  `paired_ratio`: the median of per-turn ratios (drift between turns cancels; what reproduces
  run to run on a 2-core VM); `ratio_lines`: the table every benchmark prints;
* `TensorMemory`: exact peak bytes of the tensors a block creates, where a process's peak resident
  set depends on the allocator's state.
"""
from __future__ import annotations

import math
import statistics
import time
import weakref
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode

from soft_spatial.engines import LocalEngine
from soft_spatial.models.tokens import single_token_id
from soft_spatial.softthink import AdaptSoft, SamplingConfig, SoftThinkingConfig, collate_traces


def random_controller(hidden, seed=0, width=32):
    """An AdaptSoft with random (non-initial) weights, so τ varies by step."""
    ctrl = AdaptSoft(hidden_size=hidden, width=width, seed=seed)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in ctrl.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return ctrl


@dataclass
class Timing:
    """Seconds of repeated measurements of one mode."""

    seconds: list[float]

    @property
    def min(self) -> float:
        return min(self.seconds)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def spread(self) -> float:
        """(max - min) / median: how much the repeats disagree."""
        return (max(self.seconds) - min(self.seconds)) / self.median


def interleaved(measure: Callable[[Hashable, int], float], modes: Sequence[Hashable],
                repeats: int) -> dict[Hashable, Timing]:
    """``measure(mode, repeat)`` for every mode in every repeat, the mode order rotating each
    repeat (hard, soft, adapt / soft, adapt, hard / ...), so no mode always runs first or last."""
    out = {m: Timing([]) for m in modes}
    for r in range(repeats):
        for m in list(modes[r % len(modes):]) + list(modes[:r % len(modes)]):
            out[m].seconds.append(measure(m, r))
    return out


def mean_seconds(fn: Callable[[], object], calls: int = 1) -> float:
    """Mean wall seconds of ``calls`` consecutive calls of ``fn``."""
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def calls_for(fn: Callable[[], object], min_seconds: float, max_calls: int = 1_000_000) -> int:
    """How many consecutive calls of ``fn`` take at least ``min_seconds``, capped at
    ``max_calls``: from one call, growing by the missing factor (at least doubling) until the
    calls fill ``min_seconds``; the calls made while counting double as a warm-up."""
    calls = 1
    while True:
        total = mean_seconds(fn, calls) * calls
        if total >= min_seconds or calls >= max_calls:
            return calls
        calls = min(max_calls, max(2 * calls, math.ceil(1.2 * calls * min_seconds / max(total, 1e-9))))


def paired_ratio(t: Timing, base: Timing) -> float:
    """Median over turns of ``t``'s seconds ÷ ``base``'s seconds in the same turn (the i-th
    measurements of :func:`interleaved`): two modes measured back to back share the machine's
    state, so drift between turns cancels."""
    return statistics.median(a / b for a, b in zip(t.seconds, base.seconds, strict=True))


def ratio_lines(timings: dict[str, Timing], base: str) -> list[str]:
    """A table: per mode min, median (seconds), spread, the min and median ratios to ``base`` and
    the :func:`paired_ratio` to it."""
    b = timings[base]
    w, r = max(11, *(len(m) for m in timings)), max(10, len(base) + 4)
    lines = [f"{'mode':>{w}} {'min s':>9} {'median s':>9} {'spread':>7} {'min×' + base:>{r}} "
             f"{'med×' + base:>{r}} {'paired×' + base:>{r + 3}}"]
    for m, t in timings.items():
        lines.append(f"{m:>{w}} {t.min:9.4g} {t.median:9.4g} {t.spread:7.1%} "
                     f"{t.min / b.min:{r}.3f} {t.median / b.median:{r}.3f} "
                     f"{paired_ratio(t, b):{r + 3}.3f}")
    return lines


def _tensors(obj):
    """The tensors in nested tuples, lists and dicts."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for x in obj:
            yield from _tensors(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x)


class TensorMemory(TorchFunctionMode):
    """Live and peak bytes of the tensor storages that torch calls create inside the block::

        with TensorMemory() as mem:
            fn()
        mem.peak  # bytes

    A storage counts from the call that returns it to the moment it is freed (a weak-reference
    finalizer); views, in-place results and storages of the call's arguments are not new, and
    tensors made before the block do not count. Deterministic, unlike a process's peak resident
    set (which depends on what the allocator kept from before); kernels' internal scratch space is
    not seen.
    """

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0
        self._mine: set[int] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not isinstance(out, (torch.Tensor, tuple, list)):
            return out
        given = {id(t.untyped_storage()) for t in _tensors((args, kwargs)) if t.layout == torch.strided}
        for t in _tensors(out):
            if t.layout != torch.strided:
                continue
            s = t.untyped_storage()
            if id(s) in given or id(s) in self._mine:
                continue
            self._mine.add(id(s))
            self.live += s.nbytes()
            self.peak = max(self.peak, self.live)
            weakref.finalize(s, self._free, id(s), s.nbytes())
        return out

    def _free(self, key: int, nbytes: int) -> None:
        self._mine.discard(key)
        self.live -= nbytes


PROMPTS = [[5, 9, 13, 40, 41, 42], [7, 8, 9, 10, 11, 12, 13, 14, 15]]


def rollouts(model_dir, n=2, max_new_tokens=12, seed=1, mode="fixed", controller=None, prompts=None,
             density=None):
    """Soft rollouts of a tiny text model that contain soft and discrete steps (their
    likelihoods recorded under ``density``, default the exact one).

    The random model never emits ``</think>``, so the think-end marker is a frequent spine token
    of a first rollout (re-decoding with the same seed reproduces the steps up to its first use).
    ``prompts`` defaults to `PROMPTS`. Returns (the LocalEngine, prompts, completions, soft-thinking
    config).
    """
    prompts = PROMPTS if prompts is None else prompts

    eng = LocalEngine.from_pretrained(model_dir, controller=None if controller is None
                                      else controller.to_state())
    sampling = SamplingConfig(max_new_tokens=max_new_tokens)
    first = eng.generate(prompts, soft_thinking=SoftThinkingConfig(mode=mode), sampling=sampling,
                         n=n, seed=seed)
    counts = Counter(t for o in first for t in o.token_ids[1:max_new_tokens // 2])
    marker = None
    for tok, _ in counts.most_common():
        text = eng.tokenizer.decode([tok])
        try:
            if single_token_id(eng.tokenizer, text) == tok and tok not in eng.eos_ids:
                marker = text
                break
        except ValueError:
            continue
    assert marker is not None
    soft_thinking = SoftThinkingConfig(mode=mode, think_end=marker)
    outs = eng.generate(prompts, soft_thinking=soft_thinking, sampling=sampling, n=n, seed=seed,
                        density=density)
    return eng, [prompts[o.prompt_index] for o in outs], outs, soft_thinking


def verl_batch(prompts, completions, pad_id=0, temperature=1.0, extra=None):
    """A TensorDict as verl's legacy trainer hands it to the workers (left-padded prompts,
    right-padded responses, collated traces), converted with verl's ``left_right_2_no_padding``."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding


    b = len(completions)
    p = max(len(x) for x in prompts)
    r = max(len(c.token_ids) for c in completions)
    prompt_t = torch.full((b, p), pad_id, dtype=torch.long)
    resp_t = torch.full((b, r), pad_id, dtype=torch.long)
    attn = torch.zeros(b, p + r, dtype=torch.long)
    for i, (x, c) in enumerate(zip(prompts, completions)):
        prompt_t[i, p - len(x):] = torch.tensor(x)
        resp_t[i, : len(c.token_ids)] = torch.tensor(c.token_ids)
        attn[i, p - len(x): p + len(c.token_ids)] = 1
    input_ids = torch.cat([prompt_t, resp_t], 1)
    position_ids = (attn.cumsum(1) - 1).clamp(min=0)
    resp_mask = attn[:, p:].clone()
    tensors = dict(input_ids=input_ids, attention_mask=attn, position_ids=position_ids,
                   prompts=prompt_t, responses=resp_t, response_mask=resp_mask,
                   **collate_traces([c.trace for c in completions], length=r))
    tensors.update(extra or {})
    td = TensorDict(tensors, batch_size=[b])
    td = left_right_2_no_padding(td)
    tu.assign_non_tensor(td, temperature=temperature)
    return td


def set_infer_keys(td, micro_batch_size, remove_padding):
    from verl.utils import tensordict_utils as tu

    tu.assign_non_tensor(td, use_remove_padding=remove_padding, use_dynamic_bsz=False,
                         micro_batch_size_per_gpu=micro_batch_size, use_fused_kernels=False,
                         max_token_len_per_gpu=4096)
    return td


def make_train_engine(model_dir, remove_padding=True, model_type="soft_language_model",
                      strategy="fsdp2", lr=1e-3, cpu=True, param_dtype="fp32",
                      gradient_checkpointing=False):
    """A real verl FSDP training engine (needs an initialised process group; ``cpu`` selects the CPU
    platform, otherwise verl's own device). Master weights are fp32; ``param_dtype`` is the
    mixed-precision compute dtype ("fp32" on the CPU, "bf16" as training runs on GPUs)."""
    if cpu:
        from soft_spatial.integration.platform import use_cpu_platform

        use_cpu_platform()
    from soft_spatial.actor import train_engine as soft_engine
    soft_engine.register()  # soft_language_model, after the platform (verl reads it at import)
    from verl.trainer.config import CheckpointConfig
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig
    from verl.workers.engine.base import EngineRegistry

    model_config = HFModelConfig(path=str(model_dir), model_type=model_type,
                                 use_remove_padding=remove_padding,
                                 enable_gradient_checkpointing=gradient_checkpointing,
                                 override_config={"attn_implementation": "sdpa"})
    engine_config = FSDPEngineConfig(strategy=strategy, use_torch_compile=False, model_dtype="fp32",
                                     mixed_precision={"param_dtype": param_dtype,
                                                      "reduce_dtype": "fp32",
                                                      "buffer_dtype": "fp32"},
                                     use_remove_padding=remove_padding)
    optim = FSDPOptimizerConfig(lr=lr, total_training_steps=10, clip_grad=1.0)
    train_engine = EngineRegistry.new(model_type=model_type, backend=strategy,
                                      model_config=model_config, engine_config=engine_config,
                                      optimizer_config=optim, checkpoint_config=CheckpointConfig())
    train_engine.initialize()
    return train_engine


def actor_config(**kw):
    from verl.workers.config import ActorConfig, PolicyLossConfig

    return ActorConfig(strategy="fsdp2", ppo_micro_batch_size_per_gpu=2, rollout_n=1,
                       use_kl_loss=True, kl_loss_type="low_var_kl", kl_loss_coef=1e-3,
                       clip_ratio=0.2, policy_loss=PolicyLossConfig(loss_mode="soft_grpo"), **kw)


def train_batch_td(train_engine, prompts, outs, micro_batch_size=2, remove_padding=True, seed=0,
                   device="cpu"):
    """A training batch: old (= current) and ref log-probs from the verl training engine, random
    advantages (tensors on ``device``, where verl's workers put them before the engine sees them)."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import no_padding_2_padding

    td = set_infer_keys(verl_batch(prompts, outs), micro_batch_size, remove_padding).to(device)
    with train_engine.eval_mode():
        out = train_engine.infer_batch(td)
    old = no_padding_2_padding(out["model_output"]["log_probs"], td).detach().cpu()
    g = torch.Generator().manual_seed(seed)
    b, r = old.shape
    adv = torch.randn(b, 1, generator=g).expand(b, r).contiguous()
    td = set_infer_keys(verl_batch(prompts, outs, extra=dict(
        old_log_probs=old, ref_log_prob=old + 0.01 * torch.randn(b, r, generator=g),
        advantages=adv)), micro_batch_size, remove_padding).to(device)
    tu.assign_non_tensor(td, global_batch_size=b)
    return td


# -- exact gradient alignment against the naive per-step form (scripts/bench_alignment.py, the GPU
# kit's stage b) ----------------------------------------------------------------------------------
ALIGN_K, ALIGN_DENSE = 5, 8  # candidates per soft step; dense discrete reference steps


def alignment_inputs(v, d, n, seed=0, device="cpu"):
    """Inputs of `alignment_scores` shaped as training makes them: N soft (K-sparse) optimisation
    steps, 25% as many soft reference steps plus ALIGALIGN_DENSE dense discrete ones."""
    import torch
    from soft_spatial.softthink import SparseGrad
    g = torch.Generator().manual_seed(seed)
    n_ref = max(1, n // 4)
    d_opt = SparseGrad(torch.randint(0, v, (n, ALIGN_K), generator=g), torch.randn(n, ALIGN_K, generator=g))
    v_opt = torch.randn(n, d, generator=g)
    d_ref = [SparseGrad(torch.randint(0, v, (n_ref, ALIGN_K), generator=g),
                        torch.randn(n_ref, ALIGN_K, generator=g)),
             torch.randn(ALIGN_DENSE, v, generator=g) / v ** 0.5]
    v_ref = [torch.randn(n_ref, d, generator=g), torch.randn(ALIGN_DENSE, d, generator=g)]
    d_opt, d_ref = SparseGrad(d_opt.ids.to(device), d_opt.values.to(device)), [
        SparseGrad(d_ref[0].ids.to(device), d_ref[0].values.to(device)), d_ref[1].to(device)]
    return d_opt, v_opt.to(device), d_ref, [x.to(device) for x in v_ref]


def naive_gref(d_ref, v_ref, v, device="cpu"):
    """G_ref = Σ_s d_s v_sᵀ, built once as a dense V×D matrix."""
    import torch
    g_ref = torch.zeros(v, v_ref[0].shape[1], device=device)
    for dd, vv in zip(d_ref, v_ref):
        dense = dd.to_dense(v) if not isinstance(dd, torch.Tensor) else dd
        g_ref += dense.T @ vv
    return g_ref


def naive_steps(d_opt, v_opt, g_ref, steps):
    """α_t = ⟨d_t v_tᵀ, G_ref⟩ for the first ``steps`` steps: one dense d_t and one V×D outer
    product per step."""
    import torch
    d_t = torch.empty(g_ref.shape[0], device=g_ref.device)
    outer = torch.empty_like(g_ref)
    out = []
    for t in range(steps):
        d_t.zero_().index_add_(0, d_opt.ids[t], d_opt.values[t])
        out.append(torch.outer(d_t, v_opt[t], out=outer).mul_(g_ref).sum())
    return torch.stack(out)
