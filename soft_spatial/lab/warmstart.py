"""The warm start: a short supervised stage that teaches a tiny Qwen3-VL the training format.

``python -m soft_spatial.lab.warmstart model.path=INIT data.root=BENCH output_dir=OUT``
(config: ``configs/warmstart.yaml``) trains on the synthetic benchmark's train split: our
training prompt (system prompt, image, question and lettered options, exactly as
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

Progress is printed every ``log_every`` steps (loss, tokens/s); a checkpoint (model, optimizer,
schedule, data order) is written every ``save_every`` steps and an interrupted run resumes from it.
"""
from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from soft_spatial.data import load_omnispatial
from soft_spatial.data.prompt import build_messages
from soft_spatial.data.record import QuestionRecord, index_to_letter, letter_to_index
from soft_spatial.data.synthetic import read_reasoning
from soft_spatial.engines.prompts import chat_images
from soft_spatial.models.loading import load_model
from soft_spatial.softthink import from_mapping

__all__ = ["WarmStartConfig", "assistant_turn", "demonstration", "encode", "collate",
           "response_loss", "train", "run"]

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
CHECKPOINT = "warmstart_state.pt"
THINK_OPEN = "<think>\n"


@dataclass
class WarmStartConfig:
    """Typed form of ``configs/warmstart.yaml``."""

    model_path: str
    data_root: str
    output_dir: str
    split: str = "train"
    steps: int = 600
    batch_size: int = 32
    lr: float = 2e-3
    warmup_steps: int = 20
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    clip_grad: float = 1.0
    answer_weight: float = 1.0
    noise: float = 0.0
    seed: int = 0
    log_every: int = 25
    save_every: int = 100
    threads: int | None = None

    def __post_init__(self):
        for name in ("steps", "batch_size", "log_every", "save_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"warmstart.{name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"warmstart.lr must be > 0, got {self.lr}")
        if not self.answer_weight > 0:
            raise ValueError(f"warmstart.answer_weight must be > 0, got {self.answer_weight}")
        if not 0 <= self.noise < 1:
            raise ValueError(f"warmstart.noise must be in [0, 1), got {self.noise}")


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


def encode(processor, record: QuestionRecord, reasoning: str, letter: str | None = None
           ) -> Example:
    """Render ``record`` with the chat template (generation prompt included), append the target
    response (``letter`` defaults to the record's answer) and ``<|im_end|>``, and run the
    processor once. The response starts after the generation prompt's closing ``<think>\n``."""
    letter = record.answer if letter is None else letter

    messages = build_messages(record)
    images = chat_images(messages, 0)
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
    return Example(inputs, start + len(newline), at)


def collate(examples: Sequence[Example], pad_id: int, answer_weight: float = 1.0
            ) -> dict[str, Tensor]:
    """Right-pad a batch; ``labels`` hold the response tokens and -100 elsewhere; ``weights``
    each label's weight in the loss (1, and ``answer_weight`` at the answer letter)."""
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
    batch["labels"] = labels
    weights = (labels != -100).float()
    for i, e in enumerate(examples):
        weights[i, e.answer_at] = answer_weight
    batch["weights"] = weights
    for key in ("pixel_values", "image_grid_thw"):
        if key in examples[0].inputs:
            batch[key] = torch.cat([e.inputs[key] for e in examples])
    return batch


def response_loss(model, batch: dict[str, Tensor]) -> Tensor:
    """Weighted mean next-token cross-entropy over the response tokens (position t predicts
    t+1; ``batch["weights"]``, when given, weighs each label; without it, the plain mean)."""
    labels = batch["labels"]
    out = model(**{k: v for k, v in batch.items() if k not in ("labels", "weights")})
    logits = out.logits[:, :-1].float()
    target = labels[:, 1:]
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                           target.reshape(-1), ignore_index=-100,
                                           reduction="none")
    w = batch.get("weights", (labels != -100).float())[:, 1:].reshape(-1)
    return (ce * w).sum() / w.sum()


def _lr_factor(step: int, cfg: WarmStartConfig) -> float:
    """Linear warmup, then cosine decay to ``min_lr_ratio``."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    span = max(1, cfg.steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def train(model, examples: list[Example], cfg: WarmStartConfig, pad_id: int,
          state_path: Path | None = None, log=print) -> list[float]:
    """The loop: AdamW, warmup + cosine, gradient clipping, shuffled epochs; resumes from
    ``state_path`` when it exists. Returns the loss of every step run here."""
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
            fresh = list(range(len(examples)))
            rng.shuffle(fresh)
            order += fresh
        idx, order = order[:cfg.batch_size], order[cfg.batch_size:]
        batch = collate([examples[i] for i in idx], pad_id, cfg.answer_weight)
        loss = response_loss(model, batch)
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


def run(cfg: WarmStartConfig) -> Path:
    """Encode the split, train (or resume) and write the Hugging Face model to ``output_dir``."""

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    out = Path(cfg.output_dir)
    work = out.with_name(out.name + ".work")
    work.mkdir(parents=True, exist_ok=True)
    model, processor, tokenizer = load_model(cfg.model_path, dtype=torch.float32)
    records = load_omnispatial(cfg.data_root, cfg.split)
    release = Path(cfg.data_root) / f"OmniSpatial-{cfg.split}"
    reasoning = {k: v["reasoning"] for k, v in read_reasoning(release).items()}
    missing = [r.id for r in records if r.id not in reasoning]
    if missing:
        raise KeyError(f"{release / 'data.json'}: records {missing[:5]} have no 'reasoning'")
    t0 = time.time()
    letters = [demonstration(r, cfg.noise, cfg.seed) for r in records]
    examples = [encode(processor, r, reasoning[r.id], x) for r, x in zip(records, letters)]
    wrong = sum(x != r.answer for r, x in zip(records, letters))
    print(f"warm start: {len(examples)} examples encoded in {time.time() - t0:.0f} s "
          f"({wrong} with a wrong letter, noise {cfg.noise}); "
          f"{cfg.steps} steps of {cfg.batch_size}", flush=True)
    losses = train(model, examples, cfg, tokenizer.pad_token_id, work / CHECKPOINT,
                   log=lambda m: print(m, flush=True))
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    processor.save_pretrained(tmp)
    (tmp / "warmstart.json").write_text(json.dumps(
        {"config": vars(cfg), "final_loss": losses[-1] if losses else None}, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    shutil.rmtree(work, ignore_errors=True)
    print(f"warm start: Hugging Face model at {out}", flush=True)
    return out


def main() -> None:
    import hydra
    from omegaconf import OmegaConf


    @hydra.main(config_path=str(CONFIG_DIR), config_name="warmstart", version_base=None)
    def _main(cfg) -> None:
        run(from_mapping(WarmStartConfig, OmegaConf.to_container(cfg, resolve=True),
                         "warmstart"))

    _main()


if __name__ == "__main__":
    main()
