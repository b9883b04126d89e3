"""The warm start: a short supervised stage that teaches a tiny Qwen3-VL the training format.

``python -m soft_spatial.lab.learning.warmstart model_path=INIT data_root=BENCH output_dir=OUT
[knob=value ...]`` (the knobs, their defaults and why: ``lab/learning/config.py``) trains on the
synthetic benchmark's train split: our training prompt (system prompt, image, question and lettered
options, exactly as
``soft_spatial.data.prepare`` builds it) followed by the target response
``<think>\\n{reasoning}\\n</think>\\n\\n{letter}<|im_end|>`` (the format ``soft_spatial.data.reward``
scores), with the cross-entropy on the response tokens only. The result is an ordinary Hugging
Face model directory (weights, config, tokenizer, processor, chat template).

Why not verl's SFT trainer: verl 0.9.1's ``verl.trainer.sft_trainer`` does serve this model (its
``MultiTurnSFTDataset`` reads our image chats and the engine runs on soft_spatial's CPU platform;
the first version of this stage used it), but on a CPU its log-probability path falls back to
``logprobs_from_logits_v2``, a Python loop over every token of every sequence (flash-attn's
fused cross-entropy is GPU-only), a Python loop over every token of the packed batch; with a
model of ~1M parameters that loop, not the model, is the step, and the warm start needs over a
hundred steps inside the demo's 15-minute budget.

Path questions (``path_*`` tasks) are trained in the views of :mod:`soft_spatial.lab.learning.path_views`
(``view``: ``hard``, the hard view alone; ``mix``, the hard and the soft view of every scene in the
same step; ``nochain``, the answer alone); other records are trained as above in ``hard`` and
``mix`` and answer-only in ``nochain``.

Progress is printed every ``log_every`` steps (loss, tokens/s); a checkpoint (model, optimizer,
schedule, data order) is written every ``save_every`` steps and an interrupted run resumes from it.
The run's key (`run_key`: the settings the weights depend on, and every byte of the initial model
and the training split) is recorded beside that checkpoint and inside the finished model: a resume
under other settings (another batch size or learning rate would continue the saved optimizer and
data order under the new ones) is refused naming each difference, and a finished run re-run is a
no-op.
"""
from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import Tensor

from soft_spatial.data import load_omnispatial
from soft_spatial.data.prompt import build_messages
from soft_spatial.data.record import QuestionRecord, index_to_letter, letter_to_index
from soft_spatial.data.synthetic import PATH_TASKS, read_rows
from soft_spatial.engines.prompts import chat_images
from soft_spatial.infra.dirlock import DirLockedError, OutputLock
from soft_spatial.infra.malloc import large_blocks_mapped
from soft_spatial.infra.provenance import (Keyed, OutputKeyMismatch, Verdict, make_key, path_digest,
                                           record, sha256_cache)
from soft_spatial.infra.signals import command
from soft_spatial.lab.learning.config import CONFIG_DIR, WarmStartConfig
from soft_spatial.lab.learning.path_views import (PathTruth, Target, draw_mixture_scores, hard_trace,
                                         soft_view_targets, trace_words, word_positions)
from soft_spatial.models.loading import load_model
from soft_spatial.softthink.replay import soft_inputs

__all__ = ["assistant_turn", "demonstration", "encode", "encode_views",
           "collate", "add_mixture_noise",
           "response_logits", "response_loss", "train", "run"]

CHECKPOINT = "warmstart_state.pt"
#: the key (`run_key`) beside the saved state in ``OUT.work`` and inside the finished ``OUT``
KEY_FILE = "warmstart.key.json"
THINK_OPEN = "<think>\n"


def assistant_turn(reasoning: str, letter: str) -> str:
    """The target response after the generation prompt's ``<think>\\n``: a short chain of
    thought, then the letter alone (full answer and format reward)."""
    return f"{reasoning.strip()}\n</think>\n\n{letter}"


@dataclass
class Example:
    """One tokenised training example: processor tensors of prompt + response, and where the
    response starts."""

    inputs: dict[str, Tensor]
    response_start: int
    answer_at: int  # position of the answer letter (the token before <|im_end|>)
    answer_weight: float | None = None  # the letter's loss weight (None: the run's answer_weight)
    soft_labels: tuple[Target, ...] = ()  # positions whose target is a distribution
    mixtures: tuple[Target, ...] = ()  # positions fed a mixture of candidates (log p̃)
    images: tuple = ()  # with lazy pixels: the images whose pixel values collate computes


def demonstration(record: QuestionRecord, noise: float, seed: int) -> str:
    """The letter a demonstrator who reasons right but writes a wrong letter on a fraction
    ``noise`` of the questions gives for ``record``: with probability ``noise`` (drawn from
    ``seed`` and the record's id, so the same records in every run) a uniformly drawn wrong
    option's letter, else the answer. GRPO, rewarded by the real answer, can learn to write the
    letter its own reasoning names."""
    rng = random.Random(f"{seed}:{record.id}")
    if rng.random() >= noise:
        return record.answer
    right = letter_to_index(record.answer)
    return index_to_letter(rng.choice([i for i in range(len(record.options)) if i != right]))


def encode(processor, record: QuestionRecord, reasoning: str, letter: str | None = None,
           lazy_pixels: bool = False, images: list | None = None) -> Example:
    """Render ``record`` with the chat template (generation prompt included), append the target
    response (``letter`` defaults to the record's answer) and ``<|im_end|>``, and run the
    processor once. The response starts after the generation prompt's closing ``<think>\n``.
    ``lazy_pixels``: keep the images, not their pixel values (:func:`collate` computes them with
    the processor's image processor); ``images``: the chat's images, when already loaded."""
    letter = record.answer if letter is None else letter

    messages = build_messages(record)
    images = chat_images(messages, 0) if images is None else images
    prompt = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if not prompt.endswith(THINK_OPEN):
        raise ValueError(f"the chat template's generation prompt must end with {THINK_OPEN!r}")
    enc = processor(text=[prompt + assistant_turn(reasoning, letter) + "<|im_end|>"],
                    images=images or None, return_tensors="pt")
    inputs = {k: v for k, v in enc.items() if isinstance(v, Tensor)}
    ids = inputs["input_ids"][0].tolist()
    tok = processor.tokenizer
    think = tok.convert_tokens_to_ids("<think>")
    newline = tok.encode("\n", add_special_tokens=False)
    start = len(ids) - ids[::-1].index(think)  # just after the last <think>
    if ids[start:start + len(newline)] != newline:
        raise ValueError(f"record {record.id!r}: '<think>\\n' does not tokenise as <think> + "
                         f"newline inside the conversation")
    at = len(ids) - 2
    if tok.decode(ids[at:at + 1]).strip() != letter:
        raise ValueError(f"record {record.id!r}: the answer {letter!r} is not one token "
                         f"before <|im_end|>")
    if lazy_pixels and "pixel_values" in inputs:  # ~0.9 MB per 192-pixel image: made per batch
        del inputs["pixel_values"]
        return Example(inputs, start + len(newline), at, images=tuple(images))
    return Example(inputs, start + len(newline), at)


def encode_views(processor, record: QuestionRecord, row: dict, cfg: WarmStartConfig,
                 lazy_pixels: bool = False) -> list[Example]:
    """The examples ``record`` is trained on in ``cfg.view`` (module docstring;
    :mod:`soft_spatial.lab.learning.path_views` for path questions). ``row`` is its ``data.json`` row;
    ``lazy_pixels`` as for :func:`encode` (the views share one loaded image)."""
    letter = demonstration(record, cfg.noise, cfg.seed)
    images = chat_images(build_messages(record), 0)

    def one(reasoning: str, letter: str) -> Example:
        return encode(processor, record, reasoning, letter, lazy_pixels, images)

    if cfg.view == "nochain":
        return [one("", letter)]
    if row.get("synthetic_task") not in PATH_TASKS:
        return [one(row["reasoning"], letter)]
    where = f"{cfg.data_root} ({cfg.split})"
    truth = PathTruth.from_row(row, where)
    if index_to_letter(truth.quarter(truth.true_branch)) != record.answer:
        raise ValueError(f"{where}: record {record.id!r}: the true branch ends in "
                         f"{truth.branches[truth.true_branch][-1]}, not in answer {record.answer}")
    tok = processor.tokenizer
    branch, reasoning, own = hard_trace(truth, cfg.seed, record.id)
    hard = one(reasoning, letter if branch == truth.true_branch else own)
    ids = hard.inputs["input_ids"][0].tolist()
    positions = word_positions(tok, ids, hard.response_start, reasoning.split(), where)
    first = soft_view_targets(tok, truth, positions, cfg.seed, record.id, cfg.distractor_mass)[0][0]
    hard = replace(hard, answer_weight=None if branch == truth.true_branch else 0.0,
                   soft_labels=(first,) if truth.m > 1 else ())
    if cfg.view == "hard":
        return [hard]
    words = trace_words(truth, truth.true_branch)
    soft = one(" ".join(words), letter)
    positions = word_positions(tok, soft.inputs["input_ids"][0].tolist(), soft.response_start,
                               words, where)
    targets, mixtures = soft_view_targets(tok, truth, positions, cfg.seed, record.id,
                                          cfg.distractor_mass)
    return [hard, replace(soft, soft_labels=tuple(targets), mixtures=tuple(mixtures))]


def collate(examples: Sequence[Example], pad_id: int, answer_weight: float | None = None,
            image_processor=None) -> dict[str, Tensor]:
    """Right-pad a batch; ``labels`` hold the response tokens and -100 elsewhere; ``weights``
    each label's weight in the loss (1, and ``answer_weight`` at the answer letter; None: 1 there
    too, the plain mean)."""
    n = max(e.inputs["input_ids"].shape[1] for e in examples)
    batch: dict[str, Tensor] = {}
    for key in ("input_ids", "attention_mask", "mm_token_type_ids"):
        if key not in examples[0].inputs:
            continue
        fill = pad_id if key == "input_ids" else 0
        rows = []
        for e in examples:
            t = e.inputs[key][0]
            rows.append(torch.cat([t, t.new_full((n - t.shape[0],), fill)]))
        batch[key] = torch.stack(rows)
    labels = torch.full_like(batch["input_ids"], -100)
    for i, e in enumerate(examples):
        length = e.inputs["input_ids"].shape[1]
        labels[i, e.response_start:length] = batch["input_ids"][i, e.response_start:length]
    for i, e in enumerate(examples):
        for t in e.soft_labels:
            labels[i, t.position] = -100  # a distribution, not a token: soft_* below
    batch["labels"] = labels
    weights = (labels != -100).float()
    run_weight = 1.0 if answer_weight is None else answer_weight
    for i, e in enumerate(examples):
        weights[i, e.answer_at] = run_weight if e.answer_weight is None else e.answer_weight
        for t in e.soft_labels:
            weights[i, t.position] = 1.0
    batch["weights"] = weights
    soft = [(i, t) for i, e in enumerate(examples) for t in e.soft_labels]
    if soft:
        width = max(len(t.ids) for _, t in soft)
        batch["soft_rows"] = torch.tensor([i for i, _ in soft])
        batch["soft_pos"] = torch.tensor([t.position for _, t in soft])
        batch["soft_ids"] = torch.tensor([t.ids + (0,) * (width - len(t.ids)) for _, t in soft])
        batch["soft_probs"] = torch.tensor([t.values + (0.0,) * (width - len(t.values))
                                            for _, t in soft])
    mixed = [(i, t) for i, e in enumerate(examples) for t in e.mixtures]
    if mixed:
        batch["mix_rows"] = torch.tensor([i for i, _ in mixed])
        batch["mix_pos"] = torch.tensor([t.position for _, t in mixed])
        batch["mix_ids"] = torch.tensor([t.ids for _, t in mixed])
        batch["mix_logp"] = torch.tensor([t.values for _, t in mixed], dtype=torch.float32)
    for key in ("pixel_values", "image_grid_thw"):
        if key in examples[0].inputs:
            batch[key] = torch.cat([e.inputs[key] for e in examples])
    if examples[0].images and "pixel_values" not in examples[0].inputs:
        if image_processor is None:
            raise ValueError("examples encoded with lazy_pixels need collate's image_processor")
        batch["pixel_values"] = image_processor(
            images=[im for e in examples for im in e.images], return_tensors="pt")["pixel_values"]
    return batch


#: batch keys that are the loss's, not the model's
LOSS_KEYS = ("labels", "weights", "soft_rows", "soft_pos", "soft_ids", "soft_probs", "mix_rows",
             "mix_pos", "mix_ids", "mix_logp", "mix_scores", "mix_tau")


def add_mixture_noise(batch: dict[str, Tensor], generator: torch.Generator) -> dict[str, Tensor]:
    """Draw the soft view's Gumbel noise and per-sequence τ (:func:`~soft_spatial.lab.learning.path_views.
    draw_mixture_scores`) into ``batch["mix_scores"]``, ``batch["mix_tau"]`` (no-op without
    mixtures)."""
    if "mix_logp" in batch:
        batch["mix_scores"], batch["mix_tau"] = draw_mixture_scores(
            batch["mix_logp"], batch["mix_rows"], batch["input_ids"].shape[0], generator)
    return batch


def _mixture_hook(model, batch: dict[str, Tensor]):
    """The soft view's inputs: :func:`soft_spatial.softthink.replay.soft_inputs` over the
    batch's mixture positions (softmax(z/τ)-weighted candidate embeddings)."""
    shape = batch["input_ids"].shape
    mask = torch.zeros(shape, dtype=torch.bool)
    rows, pos = batch["mix_rows"], batch["mix_pos"]
    mask[rows, pos] = True
    k = batch["mix_ids"].shape[-1]
    ids = torch.zeros(*shape, k, dtype=torch.long)
    scores = torch.zeros(*shape, k)
    tau = torch.ones(shape)
    ids[rows, pos], scores[rows, pos], tau[rows, pos] = (
        batch["mix_ids"], batch["mix_scores"].float(), batch["mix_tau"].float())
    return soft_inputs(model.get_input_embeddings(), mask, ids, scores, tau, mask)


def response_logits(model, batch: dict[str, Tensor]) -> Tensor:
    """The model's logits ``[B, L, V]`` over a :func:`collate` batch, its mixture positions
    (``mix_*``, with their noise drawn by :func:`add_mixture_noise`) fed their mixtures: what
    :func:`response_loss` scores."""
    from contextlib import nullcontext

    if "mix_ids" in batch and "mix_scores" not in batch:
        raise ValueError("the batch has mixture inputs without their noise: add_mixture_noise()")
    with _mixture_hook(model, batch) if "mix_ids" in batch else nullcontext():
        return model(**{k: v for k, v in batch.items() if k not in LOSS_KEYS}).logits


def response_loss(model, batch: dict[str, Tensor]) -> Tensor:
    """Weighted mean next-token cross-entropy over the response tokens (position t predicts
    t+1; ``batch["weights"]``, when given, weighs each label; without it, the plain mean). Soft
    labels (``soft_*``) add −Σ_j q_j log p_j at their positions; mixture positions (``mix_*``,
    with their noise drawn by :func:`add_mixture_noise`) are fed their mixtures."""
    labels = batch["labels"]
    logits = response_logits(model, batch)[:, :-1].float()
    target = labels[:, 1:]
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                           target.reshape(-1), ignore_index=-100,
                                           reduction="none")
    w = batch.get("weights", (labels != -100).float())[:, 1:]
    total = (ce * w.reshape(-1)).sum()
    if "soft_ids" in batch:
        rows, pos = batch["soft_rows"], batch["soft_pos"]
        logp = torch.log_softmax(logits[rows, pos - 1], dim=-1).gather(-1, batch["soft_ids"])
        soft_ce = -(batch["soft_probs"] * logp).sum(-1)
        total = total + (soft_ce * w[rows, pos - 1]).sum()
    return total / w.sum()


def _lr_factor(step: int, cfg: WarmStartConfig) -> float:
    """Linear warmup, then cosine decay to ``min_lr_ratio``."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    span = max(1, cfg.steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def train(model, examples: list[Example | list[Example]], cfg: WarmStartConfig, pad_id: int,
          state_path: Path | None = None, log=print, image_processor=None) -> list[float]:
    """The loop: AdamW, warmup + cosine, gradient clipping, shuffled epochs; resumes from
    ``state_path`` when it exists. Returns the loss of every step run here. An entry of
    ``examples`` may be a list (a record's views): a step takes ``batch_size`` records with all
    their views. The soft view's noise is drawn from ``seed`` and the step (the same on resume)."""
    groups = [e if isinstance(e, list) else [e] for e in examples]
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _lr_factor(s, cfg))
    rng = random.Random(cfg.seed)
    order: list[int] = []
    step = 0
    if state_path is not None and state_path.is_file():
        state = torch.load(state_path, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        rng.setstate(state["rng"])
        order, step = state["order"], state["step"]
        log(f"warm start: resumed at step {step}")
    model.train()
    losses: list[float] = []
    t0, tokens = time.time(), 0
    while step < cfg.steps:
        if len(order) < cfg.batch_size:
            fresh = list(range(len(groups)))
            rng.shuffle(fresh)
            order += fresh
        idx, order = order[:cfg.batch_size], order[cfg.batch_size:]
        batch = collate([e for i in idx for e in groups[i]], pad_id, cfg.answer_weight,
                        image_processor)
        noise = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
        loss = response_loss(model, add_mixture_noise(batch, noise))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_grad)
        opt.step()
        sched.step()
        step += 1
        losses.append(loss.item())
        tokens += int(batch["attention_mask"].sum())
        if step % cfg.log_every == 0 or step == cfg.steps:
            recent = losses[-cfg.log_every:]
            log(f"warm start step {step}/{cfg.steps}: loss {sum(recent) / len(recent):.4f}, "
                f"lr {sched.get_last_lr()[0]:.2e}, {tokens / (time.time() - t0):.0f} tokens/s")
        if state_path is not None and (step % cfg.save_every == 0 or step == cfg.steps):
            tmp = state_path.with_suffix(".tmp")
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                        "scheduler": sched.state_dict(), "rng": rng.getstate(),
                        "order": order, "step": step}, tmp)
            os.replace(tmp, state_path)
    return losses


def run_key(cfg: WarmStartConfig) -> dict:
    """What the warm start's weights depend on (`infra.provenance`): its settings but the
    output-neutral ones (`WarmStartSettings.weight_settings`), seed, view and split, and every byte
    of the initial model and of the split it trains on."""
    release = Path(cfg.data_root) / f"OmniSpatial-{cfg.split}"
    with sha256_cache() as cache:
        inputs = {"model": path_digest(cfg.model_path, cache), "data": path_digest(release, cache)}
    return make_key({**cfg.weight_settings(), "seed": cfg.seed, "view": cfg.view,
                     "split": cfg.split, "inputs": inputs})


def _keyed(out: Path, work: Path, key: dict) -> tuple[Keyed, Keyed]:
    """The finished model ``out`` and the saved state in ``work``, each keyed by ``key``
    (`run_key`; its file inside the directory)."""
    model = Keyed("the warm start", out, key, at=out / KEY_FILE, hint=(
        f"Choose another output_dir, or remove {out} to train it again."), unkeyed=(
        f"{out} exists but holds no {KEY_FILE} (written before the warm start recorded its "
        f"settings, or not by it): remove it to train it again, or choose another output_dir"))
    state = Keyed("the warm start's saved state", work / CHECKPOINT, key, at=work / KEY_FILE, hint=(
        f"Resume with the settings it was saved with, or remove {work} to start over: a resume "
        f"keeps the saved optimizer, schedule and data order."), unkeyed=(
        f"{work / CHECKPOINT} holds no {KEY_FILE} beside it (saved before the warm start recorded "
        f"its settings): remove {work} to start over"))
    return model, state


def run(cfg: WarmStartConfig) -> Path:
    """Encode the split, train (or resume) and write the Hugging Face model to ``output_dir``.
    Nothing runs when ``output_dir`` already holds this warm start (its key equal); an output or a
    saved state (in ``OUT.work``) of other settings, or of a version that kept no key, is refused
    before anything changes, naming what differs."""
    out = Path(cfg.output_dir)
    work = out.with_name(out.name + ".work")
    model, state = _keyed(out, work, run_key(cfg))
    with OutputLock(out, "warm start output"):
        if model.verdict() is Verdict.SAME and (out / "model.safetensors").is_file():
            print(f"warm start: {out} is done with these settings", flush=True)
            return out
        if state.output.is_file():  # a key beside no saved state protects nothing
            state.verdict()
        state.record()  # the state saved in work is this key's
        _train_and_save(cfg, out, work, model.key)
    return out


def _train_and_save(cfg: WarmStartConfig, out: Path, work: Path, key: dict) -> None:
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    model, processor, tokenizer = load_model(cfg.model_path, dtype=torch.float32)
    records = load_omnispatial(cfg.data_root, cfg.split)
    release = Path(cfg.data_root) / f"OmniSpatial-{cfg.split}"
    rows = read_rows(release)
    missing = [r.id for r in records if "reasoning" not in rows.get(r.id, {})]
    if missing:
        raise KeyError(f"{release / 'data.json'}: records {missing[:5]} have no 'reasoning'")
    t0 = time.time()
    with large_blocks_mapped():  # else the loop keeps every dropped image's pixel values
        examples = [encode_views(processor, r, rows[r.id], cfg, lazy_pixels=True)
                    for r in records]
    wrong = sum(demonstration(r, cfg.noise, cfg.seed) != r.answer for r in records)
    print(f"warm start: {len(examples)} records ({sum(map(len, examples))} sequences, view "
          f"{cfg.view}) encoded in {time.time() - t0:.0f} s ({wrong} with a wrong letter, noise "
          f"{cfg.noise}); {cfg.steps} steps of {cfg.batch_size}", flush=True)
    losses = train(model, examples, cfg, tokenizer.pad_token_id, work / CHECKPOINT,
                   image_processor=processor.image_processor,
                   log=lambda m: print(m, flush=True))
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    processor.save_pretrained(tmp)
    (tmp / "warmstart.json").write_text(json.dumps(
        {"config": vars(cfg), "final_loss": losses[-1] if losses else None}, indent=2))
    record(tmp / KEY_FILE, key)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    shutil.rmtree(work, ignore_errors=True)
    print(f"warm start: Hugging Face model at {out}", flush=True)


def main() -> None:
    import hydra
    from omegaconf import OmegaConf

    @hydra.main(config_path=str(CONFIG_DIR), config_name="warmstart", version_base=None)
    def _main(cfg) -> None:
        from omegaconf.errors import OmegaConfBaseException

        try:
            config = OmegaConf.to_object(cfg)
        except (ValueError, OmegaConfBaseException) as e:  # a constraint, a missing path: one line
            raise SystemExit(f"python -m soft_spatial.lab.learning.warmstart: {e}") from None
        try:
            run(config)
        except (OutputKeyMismatch, DirLockedError, FileNotFoundError) as e:  # refused: nothing changed
            raise SystemExit(f"python -m soft_spatial.lab.learning.warmstart: {e}") from None

    # SIGTERM (Slurm, timeout, the learning experiment's stop) as Ctrl-C: the last saved state kept
    with command("python -m soft_spatial.lab.learning.warmstart",
                 "the last saved state is kept; the same command resumes from it"):
        _main()


if __name__ == "__main__":
    main()
