"""D — soft parity on CUDA at the 2B shape: SGLang in fp32 against the embedded engine's fp32 and
fp64 runs of the same weights, prompts and seeds (the headline plan's D jobs; the bound is
docs/sglang.md's, applied per row by :func:`~.parity.row_verdicts`).

Two kinds of job: ``references`` runs the embedded engine (``LocalEngine``) in fp32 and fp64 for
the asked modes and stores the completions as JSON in the scratch directory; ``engine`` starts one
SGLang engine in fp32 (attention ``torch_native``, graphs off, native ops, TF32 off everywhere:
:func:`~.sglang_args.engine_env`), generates the same rows and gives each row its verdict, the
first divergence and the per-step |Δ| of three pairs.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from soft_spatial.lab.gpu import parity
from soft_spatial.lab.gpu.context import (KitContext, env_vars, free_memory, shared_model,
                                          wait_device_free)
from soft_spatial.lab.gpu.prompts import image_prompts
from soft_spatial.lab.bench import random_controller
from soft_spatial.lab.gpu.measure import MODES, Ctx, timed
from soft_spatial.lab.gpu.report import Skip, StageFailed, table
from soft_spatial.models.shapes import QWEN3_VL_2B, parity_init
from soft_spatial.lab.gpu.sglang_args import cpu_args, cuda_args, engine_env, unset_backends

__all__ = ["references", "engine", "server_args", "shape", "tf32_off", "stage_d"]

SEED = 7


def shape(dry: bool) -> tuple[int, int, int, int]:
    """(prompts, samples per prompt, steps, image side)."""
    return (2, 2, 8, 64) if dry else (4, 2, 32, 224)


def _sampling(dry: bool):
    from soft_spatial.softthink import SamplingConfig
    return SamplingConfig(temperature=0.8, max_new_tokens=shape(dry)[2])


def tf32_off() -> None:
    """TF32 off in this process (matmul and cuDNN): the embedded engine's fp32 reference."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def _refs_path(ctx: KitContext, mode: str) -> Path:
    return ctx.work / f"d-refs-{mode}.json"


def references(ctx: KitContext, modes: tuple[str, ...]) -> tuple[dict, list[str]]:
    """The embedded engine's fp32 and fp64 runs for ``modes``, stored for :func:`engine`."""
    from soft_spatial.softthink import SoftThinkingConfig
    model, ctrl, facts = shared_model(ctx)
    n, g, steps, side = shape(ctx.dry_run)
    tf32_off()
    t0 = time.perf_counter()
    runs = parity.local_runs(model, ctx.device, {m: SoftThinkingConfig(mode=m) for m in modes},
                             image_prompts(n, side), _sampling(ctx.dry_run), g, seed=SEED,
                             controller=ctrl)
    free_memory()
    for m in modes:
        path = _refs_path(ctx, m)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({k: parity.dump_completions(v) for k, v in runs[m].items()}))
        tmp.replace(path)
    values = {"modes": list(modes), "seconds": round(time.perf_counter() - t0, 1),
              "fp32_on_fp64_path": {m: sum(parity.same_path(a, b) for a, b in
                                           zip(runs[m]["float32"], runs[m]["float64"]))
                                    for m in modes}, "rows": n * g, "model": facts}
    lines = [f"Embedded engine (transformers, TF32 off) in fp32 and fp64 for {', '.join(modes)}: "
             f"{n} image prompts ({side}×{side}) × {g} samples, {steps} steps, seed {SEED}, "
             f"{values['seconds']:.0f} s; local fp32 on fp64's path: "
             + ", ".join(f"{m} {c}/{n * g}" for m, c in values["fp32_on_fp64_path"].items())]
    return values, lines


def server_args(dry: bool) -> dict:
    """An fp32 parity engine's SGLang server arguments (CUDA: every backend named)."""
    if dry:
        return cpu_args()
    args = cuda_args("float32", graphs=False, plugin=True, parity=True)
    missing = unset_backends(args, plugin=True)
    if missing:
        raise ValueError(f"server arguments leave backends to SGLang's defaults: {missing}")
    return args


def engine(ctx: KitContext, mode: str) -> tuple[dict, list[str]]:
    """SGLang in fp32 for ``mode`` against the stored references: a verdict per row."""
    from soft_spatial.engines.sglang.engine import SGLangEngine
    from soft_spatial.softthink import SoftThinkingConfig

    model, ctrl, _ = shared_model(ctx)
    path = _refs_path(ctx, mode)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no embedded-engine references for {mode} (its "
                                f"references job did not finish)")
    refs = {k: parity.load_completions(v) for k, v in json.loads(path.read_text()).items()}
    want, ref = refs["float32"], refs["float64"]
    n, g, steps, side = shape(ctx.dry_run)
    args = server_args(ctx.dry_run)
    conf = SoftThinkingConfig(mode=mode)
    t0 = time.perf_counter()
    with env_vars(engine_env(parity=True, native_ops=True)):
        eng = SGLangEngine(model, conf, controller=ctrl if mode == "adaptsoft" else None,
                           server_args=args)
    try:
        eng.eos_ids = []  # fixed-length decoding: every engine runs the same steps
        got = eng.generate(image_prompts(n, side), soft_thinking=conf, sampling=_sampling(ctx.dry_run),
                           n=g, seed=SEED)
    finally:
        eng.close()
        free_memory()
        if not ctx.dry_run:
            wait_device_free()
    verdicts, count, same, dev = parity.summarize(got, want, ref)
    soft = sum(int(c.trace.soft.sum()) for c in got) / max(sum(len(c.token_ids) for c in got), 1)
    values = {"mode": mode, "rows": len(ref), "same_path_as_fp32": len(same),
              "verdicts": count, "within_bound": count["ok"] + count["ill-conditioned"],
              "max_dev_vs_fp32": {k: (None if v != v else v) for k, v in dev.items()},
              "soft_step_fraction": round(soft, 4), "seconds": round(time.perf_counter() - t0, 1),
              "passed": not (count["path"] or count["bound"])}
    lines = [f"**{mode}** (SGLang fp32: attention {args['attention_backend']}, vision "
             f"{args.get('mm_attention_backend', 'default')}, CUDA graphs off, native ops, TF32 off; "
             f"{n} image prompts × {g}, {steps} steps, seed {SEED}; soft steps "
             f"{values['soft_step_fraction']:.0%}): {count['ok']} ok, {count['ill-conditioned']} "
             f"ill-conditioned (local fp32 leaves fp64's path), {count['path']} off the path, "
             f"{count['bound']} beyond the bound (max\\|SGLang − fp64\\| ≤ {parity.ATOL:g} + "
             f"{parity.AMPLIFICATION:g}·max\\|fp32 − fp64\\|)", ""]
    lines += table(["same path as local fp32", "max \\|Δ loglik\\|", "max \\|Δ scores\\|",
                    "max \\|Δ τ\\|", "within the bound"],
                   [[f"{len(same)}/{len(want)}", dev["loglik"], dev["scores"],
                     dev["tau"] if mode == "adaptsoft" else "–",
                     f"{values['within_bound']}/{len(ref)}"]])
    lines += [""] + [f"- row {r}: {v['field']} max\\|Δ\\| {v['dev']:.3g} > bound {v['bound']:.3g} "
                     f"over {v['steps']} steps" for r, v in enumerate(verdicts)
                     if v["status"] == "bound"]
    lines += [f"- first difference beyond {parity.ATOL:g}, SGLang against local fp64: "
              + parity.describe(parity.first_divergence(got, ref, parity.ATOL), ("SGLang", "fp64"))]
    lines += drift_lines("SGLang against local fp32", got, want, ("SGLang", "fp32"), 1)
    lines += drift_lines("SGLang against local fp64", got, ref, ("SGLang", "fp64"), 1)
    lines += drift_lines("local fp32 against local fp64", want, ref, ("fp32", "fp64"), 1)
    return values, lines


# -- stage d (``check.py --stages d``): every mode's parity, then throughput with graphs off ------
def sglang_server_args(dtype: str, device: str, parity: bool = False) -> dict:
    """Stage d's engines: fp32 parity (torch_native attention, no TF32 dots) or bf16 throughput,
    CUDA graphs off, every backend named (soft_spatial.lab.gpu.sglang_args)."""
    if device == "cpu":
        return cpu_args(dtype=dtype)
    return cuda_args(dtype, graphs=False, plugin=True, parity=parity)


def tf32_off_lines() -> list[str]:
    """TF32 off for fp32 parity: in this process (matmul and cuDNN flags) and in every SGLang
    scheduler process started afterwards (``NVIDIA_TF32_OVERRIDE=0`` in their inherited
    environment: cuBLAS and cuDNN then never use TF32). Returns the settings, for the report."""
    tf32_off()
    os.environ["NVIDIA_TF32_OVERRIDE"] = "0"
    return ["torch.backends.cuda.matmul.allow_tf32 = False", "torch.backends.cudnn.allow_tf32 = False",
            "NVIDIA_TF32_OVERRIDE=0 for SGLang's processes"]


def param_count(config) -> int:
    """Parameters of a model of ``config`` (built on the meta device: no memory; tied counted once)."""
    import torch
    from transformers import AutoModelForImageTextToText
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    return sum(p.numel() for p in model.parameters())


def sglang_engine(model, soft, ctrl, dtype: str, ctx: Ctx, parity: bool = False):
    from soft_spatial.engines.sglang.engine import SGLangEngine
    args = sglang_server_args(dtype, ctx.device, parity)
    with env_vars(engine_env(parity=parity, native_ops=True)):  # the schedulers inherit it
        eng = SGLangEngine(model, soft, controller=ctrl if soft.mode == "adaptsoft" else None,
                           server_args=args)
    eng.eos_ids = []  # fixed-length decoding: every mode and engine runs the same steps
    return eng


def drift_lines(title: str, a, b, names: tuple[str, str], every: int) -> list[str]:
    """Per-step max |Δ| of rows ``a`` against ``b`` (``parity.per_step_deltas``) and their first
    path divergence, as report lines."""
    first = parity.describe(parity.first_divergence(a, b, float("inf")), names)
    same = sum(parity.same_path(x, y) for x, y in zip(a, b))
    out = [f"- {title}: {same}/{len(b)} rows on the same path; first path divergence: {first}"]
    out += [f"  - max \\|Δ {f}\\| per step (every {every}): {parity.curve(v, every)}"
            for f, v in parity.per_step_deltas(a, b).items()]
    return out


def stage_d(ctx: Ctx) -> list[str]:
    """SGLang with the soft plugin against the embedded engine: parity on the same weights and
    seeds (fp32, TF32 off, against the embedded engine's fp32 and fp64 runs: docs/sglang.md's
    bound), then decode throughput per mode (CUDA graphs off: the plugin needs them off in
    0.5.12, docs/sglang.md). One engine per mode: the soft settings are server-wide."""
    try:
        import sglang
    except ImportError as e:
        raise Skip(f"sglang is not installed ({e}): on a lent machine install the kit's sglang "
                   f"pack (scripts/gpu/kit.py, docs/gpu.md); on a GPU machine with network: "
                   f"pip install -e .[gpu]") from e
    if ctx.device == "cpu" and os.environ.get("SGLANG_USE_CPU_ENGINE") != "1":
        raise Skip("on the CPU SGLang's engine needs SGLANG_USE_CPU_ENGINE=1 and tests/sglang_stubs "
                   "on PYTHONPATH (as scripts/test.sh runs tests/sglang_real)")
    from transformers import AutoConfig

    from soft_spatial.engines import LocalEngine
    from soft_spatial.models import build_tiny_model
    from soft_spatial.models.shapes import check_config
    from soft_spatial.models.tiny import DEFAULT_HEAD_INIT_STD, DEFAULT_INIT_STD
    from soft_spatial.softthink import SamplingConfig, SoftThinkingConfig

    dry = ctx.dry_run
    t0 = time.perf_counter()
    # 2B: untied, though the release ties them: a random tied model's last hidden state keeps
    # its input token's embedding, whose own logit then takes the mixtures (one-hot soft steps)
    init = (dict(init_std=DEFAULT_INIT_STD, head_init_std=DEFAULT_HEAD_INIT_STD) if dry
            else dict(parity_init(QWEN3_VL_2B["hidden_size"]), tie_word_embeddings=False))
    model = build_tiny_model(ctx.workdir / "d-model", family="qwen3_vl", vocab="qwen",
                             **dict({} if dry else QWEN3_VL_2B, **init))
    config = check_config(AutoConfig.from_pretrained(model), "stage d's model")
    build_s = time.perf_counter() - t0
    ctrl = ctx.workdir / "d-adaptsoft.pt"
    random_controller(config.text_config.hidden_size).save(ctrl)
    confs = {m: SoftThinkingConfig(mode=m) for m in MODES}
    settings = (["fp32", "SGLang attention torch_native"] if ctx.device == "cpu" else
                ["fp32", "SGLang attention torch_native, vision attention sdpa", *tf32_off_lines()])
    text = config.text_config
    lines = [f"Model: {'tiny' if dry else 'Qwen3-VL-2B'}-shaped Qwen3-VL, random weights, "
             f"{param_count(config) / 1e9:.3f} B parameters (hidden {text.hidden_size}, "
             f"{text.num_hidden_layers} layers, head_dim {text.head_dim}, mrope_section "
             f"{text.rope_parameters['mrope_section']}, tied embeddings "
             f"{config.tie_word_embeddings}, weight std "
             f"{init['init_std']:.3g}, output layer {init['head_init_std']:.3g}), "
             f"written in {build_s:.0f} s; sglang "
             f"{sglang.__version__}, CUDA graphs off."]

    # 1. parity: same weights, seeds and prompts, every mode: the embedded engine in fp32 and
    # fp64 (the reference and its own fp32 drift), then SGLang in fp32
    n_par, g_par, steps_par = (2, 2, 8) if dry else (4, 2, 32)
    par_prompts = image_prompts(n_par, 64 if dry else 224)
    par_sampling = SamplingConfig(temperature=0.8, max_new_tokens=steps_par)
    refs = parity.local_runs(model, ctx.device, confs, par_prompts, par_sampling, g_par, seed=7,
                             controller=ctrl)
    drift = []
    if ctx.drift:  # the embedded engine's own fp32 − fp64 drift over a longer horizon
        steps_dr = 16 if dry else 128
        runs = parity.local_runs(model, ctx.device, confs, par_prompts,
                                 SamplingConfig(temperature=0.8, max_new_tokens=steps_dr), g_par,
                                 seed=11, controller=ctrl)
        drift = ["", f"Self-drift of the embedded engine (`--drift`): fp32 against fp64, "
                     f"{n_par} image prompts × {g_par}, {steps_dr} steps, seed 11:", ""]
        for m in MODES:
            drift += drift_lines(m, runs[m]["float32"], runs[m]["float64"], ("fp32", "fp64"),
                                 1 if dry else 4)
        del runs
    free_memory()

    rows, bad, tps, details = [], [], {}, []
    for m, conf in confs.items():
        want, ref = refs[m]["float32"], refs[m]["float64"]
        eng = sglang_engine(model, conf, ctrl, "float32", ctx, parity=True)
        try:
            got = eng.generate(par_prompts, soft_thinking=conf, sampling=par_sampling, n=g_par, seed=7)
            if dry:
                tps[("sglang", m)] = throughput_of(eng, conf, "cpu", ctx)
        finally:
            eng.close()
        verdicts, count, same, dev = parity.summarize(got, want, ref)
        rows.append([m, f"{len(same)}/{len(want)}", dev["loglik"], dev["scores"],
                     dev["tau"] if m == "adaptsoft" else "–",
                     f"{sum(parity.same_path(w, x) for w, x in zip(want, ref))}/{len(ref)}",
                     f"{count['ok'] + count['ill-conditioned']}/{len(ref)}"])
        if count["path"] or count["bound"]:
            bad.append(m)
        details += [f"**{m}** — rows: {count['ok']} ok, {count['ill-conditioned']} ill-conditioned "
                    f"(local fp32 leaves fp64's path), {count['path']} off the path, "
                    f"{count['bound']} beyond the bound"]
        details += [f"- row {r}: {v['field']} max\\|Δ\\| {v['dev']:.3g} > bound {v['bound']:.3g} "
                    f"over {v['steps']} steps" for r, v in enumerate(verdicts) if v["status"] == "bound"]
        details += [f"- row {r}: local fp32 leaves fp64's path after {v['fp32_path']} steps, SGLang "
                    f"after {v['path']}" for r, v in enumerate(verdicts)
                    if v["status"] == "ill-conditioned"]
        if 2 * count["ill-conditioned"] > len(ref):
            ctx.notes.append(f"d: {m}: the embedded engine's own fp32 run leaves its fp64 path in "
                             f"{count['ill-conditioned']}/{len(ref)} rows within {steps_par} steps "
                             f"(amplification): parity is bounded only on the steps they share")
        details += [f"- first difference beyond {parity.ATOL:g}, SGLang against local fp64: "
                    + parity.describe(parity.first_divergence(got, ref, parity.ATOL),
                                      ("SGLang", "fp64"))]
        details += drift_lines("SGLang against local fp32", got, want, ("SGLang", "fp32"), 1)
        details += drift_lines("SGLang against local fp64", got, ref, ("SGLang", "fp64"), 1)
        details += drift_lines("local fp32 against local fp64", want, ref, ("fp32", "fp64"), 1)
        details.append("")
    del refs
    lines += ["", f"Parity with the embedded engine ({'; '.join(settings)}; {n_par} image prompts × "
              f"{g_par} samples, {steps_par} steps, seed 7). Bound per row and field "
              f"(docs/sglang.md): max\\|SGLang − local fp64\\| ≤ {parity.ATOL:g} + "
              f"{parity.AMPLIFICATION:g} · max\\|local fp32 − local fp64\\|; max deviations "
              f"over the rows on local fp32's path:", ""]
    lines += table(["mode", "same path", "max \\|Δ loglik\\|", "max \\|Δ scores\\|", "max \\|Δ τ\\|",
                    "local fp32 on fp64's path", "within the bound"], rows)
    lines += ["", *details] + drift
    if bad:
        ctx.notes.append(f"d: SGLang failed the fp32 parity bound in {bad} (see the rows)")

    # 2. throughput: one batch per mode on SGLang (the parity engines in a dry run, bf16 ones on
    # a GPU) and locally
    if not dry:
        for m, conf in confs.items():
            eng = sglang_engine(model, conf, ctrl, "bfloat16", ctx)
            try:
                tps[("sglang", m)] = throughput_of(eng, conf, "cpu", ctx)  # generate returns when done
            finally:
                eng.close()
    local = LocalEngine.from_pretrained(model, device=ctx.device, dtype=ctx.dtype, controller=ctrl,
                                        max_batch_rows=4 if dry else 64)
    local.eos_ids = []
    for m, conf in confs.items():
        tps[("local", m)] = throughput_of(local, conf, ctx.device, ctx)
    del local
    free_memory()
    n, g, steps = throughput_shape(ctx)
    lines += ["", f"Decode throughput ({'float32' if dry else 'bfloat16'}, {n} prompts × G={g}, "
              f"{steps} steps, eos ignored; SGLang's time includes its prompt prefill and "
              f"scheduling):", ""]
    lines += table(["mode", "SGLang tok/s", "× SGLang hard", "embedded tok/s", "SGLang / embedded"],
                   [[m, round(tps[("sglang", m)], 1),
                     round(tps[("sglang", m)] / tps[("sglang", "hard")], 3),
                     round(tps[("local", m)], 1),
                     round(tps[("sglang", m)] / tps[("local", m)], 3)] for m in MODES])
    if bad:
        raise StageFailed(lines)
    return lines


def throughput_shape(ctx: Ctx) -> tuple[int, int, int]:
    """(prompts, samples per prompt, steps) of stage d's throughput batch."""
    return (2, 2, 8) if ctx.dry_run else (8, 8, 64 if ctx.quick else 128)


def throughput_of(eng, conf, sync_device: str, ctx: Ctx) -> float:
    """Decode tok/s of ``eng`` on stage d's throughput batch (each repeat prefills afresh)."""
    from soft_spatial.softthink import SamplingConfig
    n, g, steps = throughput_shape(ctx)
    prompts = image_prompts(n, 64 if ctx.dry_run else 320)
    eng.generate(prompts[:1], soft_thinking=conf, sampling=SamplingConfig(max_new_tokens=4))

    def run():
        if hasattr(eng, "backend"):
            eng.backend.flush_cache()
        return eng.generate(prompts, soft_thinking=conf, sampling=SamplingConfig(max_new_tokens=steps),
                            n=g, seed=1)
    sec, _, outs = timed(run, sync_device, repeats=1 if ctx.dry_run else 2, warmup=0)
    return sum(len(o.token_ids) for o in outs) / sec
