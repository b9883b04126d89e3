"""Tiny random Qwen3-VL / Qwen2.5-VL (and text-only Qwen3) checkpoints for CPU tests, written offline.

`build_tiny_model(out_dir)` writes a complete model directory: random weights (hidden 64, 2 layers,
a 1-block vision tower), a tokenizer with the Qwen special tokens, an image and a video processor,
a Qwen3-VL-Thinking style chat template and a generation config. It loads like a released
checkpoint with `AutoModelForImageTextToText`, `AutoProcessor`, `AutoTokenizer` and verl's
`hf_processor` / `hf_tokenizer`, with `HF_HUB_OFFLINE=1`. `family="qwen3"` writes a text-only
Qwen3ForCausalLM of the same size (tokenizer and chat template, no processor).

Two vocabularies:

* `vocab="qwen"`: the real Qwen tokenizer (`qwen_tokenizer.py`), vocab_size 151,936 as released,
  ~20M parameters (almost all in the embedding and the output layer).
* `vocab="small"`: a 512-entry byte-level BPE trained here on a few sentences, plus the same 26
  Qwen added tokens (ids 512..537); vocab_size rounded up to 576, so like the real model some
  logit rows have no token.

Config token ids (image, video, vision start/end, eos, pad, bos) always come from the tokenizer.

CLI: `python -m soft_spatial.models.tiny --out DIR [--family qwen3_vl|qwen2_5_vl|qwen3]
[--vocab qwen|small] [--seed N]`.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import tempfile
from pathlib import Path
from collections.abc import Sequence

import torch
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, trainers

from soft_spatial.infra.atomic import atomic_dir
from soft_spatial.models.qwen_tokenizer import QWEN_ADDED_TOKENS, load_qwen_tokenizer, with_qwen_pipeline, wrap

FAMILIES = ("qwen3_vl", "qwen2_5_vl", "qwen3")
"""Tiny model families: two VLMs and, for text-only code paths, a Qwen3 causal LM."""
VOCABS = ("qwen", "small")
SMALL_BPE_SIZE = 512
DEFAULT_INIT_STD = 0.1
"""Std of the random weight matrices (except the output layer)."""
DEFAULT_HEAD_INIT_STD = 0.5
"""Std of the output layer: with hidden 64 it gives logits of std ~4, i.e. peaked but not one-hot
next-token distributions (top-1 probability ~0.2-0.5, normalised top-5 entropy ~0.7-0.8), so
sampling varies. The 0.02 of real checkpoints would give nearly uniform logits at this width."""

CHAT_TEMPLATE = (
    "{%- macro render(content) -%}"
    "{%- if content is string -%}{{ content }}"
    "{%- else -%}{%- for item in content -%}"
    "{%- if item.type == 'image' or 'image' in item or 'image_url' in item -%}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif item.type == 'video' or 'video' in item -%}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{%- elif 'text' in item -%}{{ item.text }}"
    "{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.role == 'assistant' and message.reasoning_content is string -%}"
    "{{ '<think>\\n' + message.reasoning_content.strip('\\n') + '\\n</think>\\n\\n' }}"
    "{%- endif -%}"
    "{{ render(message.content) }}{{ '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n<think>\\n' }}{%- endif -%}"
)
"""Qwen3-VL-Thinking style: `<|im_start|>role\\n...<|im_end|>\\n` turns, each image as
`<|vision_start|><|image_pad|><|vision_end|>` (the processor expands the pad), an assistant
`reasoning_content` rendered inside `<think>...</think>`, and the generation prompt opening the
assistant turn with `<think>\\n`. (Tool calls and vision ids of the released template are left out.)"""

SMALL_CORPUS = (
    "Which object is to the left of the red chair? A. the lamp B. the table C. the sofa D. the door",
    "Answer with the letter of the correct option. The answer is B.",
    "The cube is behind the sphere, so from the camera the sphere is closer. "
    "If I walk around to the other side, left and right swap.\n\nC",
    "How many chairs are between the window and the bed? Count them from left to right: 1, 2, 3, 4.",
    "The picture shows a kitchen. The cup is on the table, above the floor and below the shelf.",
    "You are standing at the door facing north. Turn right by 90 degrees: now you face east.",
    "Is the blue box larger than the green ball? Compare their distance to the camera first.",
    "Question: what is the relative direction of the plant from the viewer? Options: front, back, "
    "left, right. Let me think step by step about the spatial layout of the room.",
    "system\nYou are a helpful assistant.\nuser\nLook at the image.\nassistant\nSure.",
    "Hello world! The quick brown fox jumps over the lazy dog. 0123456789 + - * / = ( ) [ ] { }",
)


def small_tokenizer_backend(vocab_size: int = SMALL_BPE_SIZE, corpus: Sequence[str] = (),
                            phrases: Sequence[str] = ()) -> Tokenizer:
    """A byte-level BPE with the Qwen pre-tokenizer, trained on SMALL_CORPUS (plus `corpus`, e.g. a
    task's prompts and answers, so that its words become whole tokens), plus the Qwen added
    tokens right after the trained vocabulary (same order and special flags as the real one),
    then `phrases` as added (non-special) tokens: each becomes one token wherever it occurs, e.g.
    a fixed system prompt."""
    tok = with_qwen_pipeline(Tokenizer(models.BPE(fuse_unk=False)))
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(list(SMALL_CORPUS) * 4 + list(corpus), trainer=trainer)
    if tok.get_vocab_size() != vocab_size:
        raise AssertionError(f"small BPE has {tok.get_vocab_size()} tokens, wanted {vocab_size}: enlarge SMALL_CORPUS")
    tok.add_tokens([AddedToken(t, special=s, normalized=False) for t, s in QWEN_ADDED_TOKENS])
    tok.add_tokens([AddedToken(p, special=False, normalized=False) for p in phrases])
    return tok


def build_tokenizer(vocab: str = "qwen", corpus: Sequence[str] = (), vocab_size: int = SMALL_BPE_SIZE,
                    phrases: Sequence[str] = ()):
    """The tokenizer of a tiny model (`vocab` "qwen" or "small"), with CHAT_TEMPLATE set.

    `corpus`, `vocab_size` and `phrases` shape the "small" BPE (see `small_tokenizer_backend`)."""
    if vocab == "qwen":
        tokenizer = load_qwen_tokenizer()
        tokenizer.chat_template = CHAT_TEMPLATE
        return tokenizer
    if vocab == "small":
        return wrap(small_tokenizer_backend(vocab_size, corpus, phrases), chat_template=CHAT_TEMPLATE)
    raise ValueError(f"unknown vocab {vocab!r}; expected one of {VOCABS}")


def _token_ids(tokenizer) -> dict[str, int]:
    names = {
        "image_token_id": "<|image_pad|>",
        "video_token_id": "<|video_pad|>",
        "vision_start_token_id": "<|vision_start|>",
        "vision_end_token_id": "<|vision_end|>",
        "eos_token_id": "<|im_end|>",
        "pad_token_id": "<|endoftext|>",
    }
    ids = {key: tokenizer.convert_tokens_to_ids(tok) for key, tok in names.items()}
    missing = [names[k] for k, v in ids.items() if v is None or v == tokenizer.unk_token_id]
    if missing:
        raise ValueError(f"tokenizer {tokenizer.name_or_path!r} lacks the Qwen tokens {missing}")
    ids["bos_token_id"] = ids["pad_token_id"]
    return ids


def _round_up(n: int, multiple: int = 64) -> int:
    return -(-n // multiple) * multiple


def tiny_config(family: str, tokenizer, vocab_size: int | None = None, **overrides):
    """The tiny config of `family` with token ids from `tokenizer`.

    `overrides` set text-config fields (e.g. `num_hidden_layers=3`); `vision_config={...}` updates the
    vision config of the VL families; `tie_word_embeddings` (default False) ties the output layer to
    the input embeddings, as the small released checkpoints do (Qwen3-VL-2B). `vocab_size`
    defaults to 151,936 for a full Qwen vocabulary, else len(tokenizer) rounded up to a multiple of 64.
    """
    from transformers import Qwen2_5_VLConfig, Qwen3Config, Qwen3VLConfig

    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES}")
    ids = _token_ids(tokenizer)
    if vocab_size is None:
        vocab_size = 151936 if len(tokenizer) > 150000 else _round_up(len(tokenizer))
    if vocab_size < len(tokenizer):
        raise ValueError(f"vocab_size {vocab_size} is smaller than the tokenizer ({len(tokenizer)} tokens)")
    text = dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        pad_token_id=ids["pad_token_id"],
        eos_token_id=ids["eos_token_id"],
        bos_token_id=ids["bos_token_id"],
    )
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                  spatial_merge_size=2, temporal_patch_size=2)
    mrope = {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [4, 2, 2]}
    if family == "qwen3_vl":
        cls, text_cls = Qwen3VLConfig, Qwen3VLConfig.sub_configs["text_config"]
        text.update(head_dim=16, rope_parameters={**mrope, "mrope_interleaved": True})
        vision.update(patch_size=16, num_position_embeddings=256, deepstack_visual_indexes=[0])
    elif family == "qwen2_5_vl":
        cls, text_cls = Qwen2_5_VLConfig, Qwen2_5_VLConfig.sub_configs["text_config"]
        text.update(rope_parameters=mrope)
        vision.update(patch_size=14, window_size=112, fullatt_block_indexes=[0])
    else:  # qwen3: text-only causal LM
        cls = text_cls = Qwen3Config
        text.update(head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": 1e4})
    vision_overrides = overrides.pop("vision_config", None) or {}
    tie = overrides.pop("tie_word_embeddings", False)
    if vision_overrides and family == "qwen3":
        raise ValueError("vision_config overrides need a VL family (qwen3_vl or qwen2_5_vl), not qwen3")
    unknown = sorted(set(overrides) - set(text_cls().to_dict()))
    if unknown:
        raise ValueError(f"unknown tiny-model overrides {unknown} for {family} (text-config fields or vision_config)")
    text.update(overrides)
    if family == "qwen3":
        return cls(**text, tie_word_embeddings=tie)
    vision.update(vision_overrides)
    top = {k: ids[k] for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")}
    return cls(text_config=text, vision_config=vision, tie_word_embeddings=tie, **top)


def build_processor(family: str, tokenizer):
    """Image + video processor for `family`, sized for tiny tests: images are resized to between 1
    and 64 merged patches (tokens), keeping the aspect ratio."""
    from transformers import (
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
        Qwen2VLVideoProcessor,
        Qwen3VLProcessor,
        Qwen3VLVideoProcessor,
    )

    if family == "qwen3_vl":
        patch, mean, std = 16, [0.5] * 3, [0.5] * 3
        processor_cls, video_cls = Qwen3VLProcessor, Qwen3VLVideoProcessor
    elif family == "qwen2_5_vl":
        patch = 14
        mean, std = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
        processor_cls, video_cls = Qwen2_5_VLProcessor, Qwen2VLVideoProcessor
    else:
        raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES}")
    factor = 2 * patch
    kwargs = dict(patch_size=patch, merge_size=2, temporal_patch_size=2, image_mean=mean, image_std=std,
                  size={"shortest_edge": factor * factor, "longest_edge": (8 * factor) ** 2})
    return processor_cls(
        image_processor=Qwen2VLImageProcessor(**kwargs),
        tokenizer=tokenizer,
        video_processor=video_cls(**kwargs),
        chat_template=CHAT_TEMPLATE,
    )


@torch.no_grad()
def init_weights_(
    model: torch.nn.Module, seed: int, std: float = DEFAULT_INIT_STD, head_std: float = DEFAULT_HEAD_INIT_STD
) -> None:
    """Deterministic re-initialisation from a generator seeded with `seed`, in `named_parameters`
    order: the output layer ~ N(0, head_std), every other parameter with 2+ dims ~ N(0, std); 1-D
    parameters keep the model's constant init (norm weights 1, biases 0). The generator lives on
    the parameters' device (the same seed gives other weights on another device)."""
    head = model.get_output_embeddings().weight
    gen = torch.Generator(device=head.device).manual_seed(seed)
    for _, param in model.named_parameters():
        if param.ndim >= 2:
            scale = head_std if param is head else std
            param.copy_(torch.randn(param.shape, generator=gen, dtype=torch.float32,
                                    device=param.device) * scale)


def build_tiny_model(
    out_dir: str | os.PathLike, family: str = "qwen3_vl", vocab: str = "qwen", seed: int = 0,
    device: str = "cpu", save_dtype: torch.dtype = torch.float32, **overrides
) -> Path:
    """Write a random tiny `family` model with tokenizer, processor and chat template to `out_dir`.

    VL families get an image + video processor; the text-only "qwen3" family (Qwen3ForCausalLM) has
    only the tokenizer.

    `overrides`: text-config fields, `vision_config={...}`, `init_std` and `head_init_std`
    (DEFAULT_INIT_STD, DEFAULT_HEAD_INIT_STD), and for `vocab="small"` the BPE's extra training
    `corpus` (texts), `bpe_size` and `phrases` (texts that become single added tokens).
    Weights depend only on (`family`, `vocab`, `seed`, `overrides`), and so does every byte written.
    `out_dir` must not exist or be empty, or hold this very build: a concurrent build of the same
    path that finished first (two ``model.build_tiny=true`` commands) is used as it is, another
    model there is refused (FileExistsError). The directory appears complete or not at all.
    Returns `out_dir` as a Path.
    `device`: where the weights are built and drawn (a GPU builds a 2B shape in seconds; its
    generator gives other weights than the CPU's); `save_dtype`: the saved weights' dtype.
    """
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, GenerationConfig

    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES}")
    init_std = overrides.pop("init_std", DEFAULT_INIT_STD)
    head_init_std = overrides.pop("head_init_std", DEFAULT_HEAD_INIT_STD)
    corpus = overrides.pop("corpus", ())
    bpe_size = overrides.pop("bpe_size", SMALL_BPE_SIZE)
    phrases = overrides.pop("phrases", ())
    if (corpus or phrases or bpe_size != SMALL_BPE_SIZE) and vocab != "small":
        raise ValueError("corpus, phrases and bpe_size shape the small BPE: use vocab='small'")
    out = Path(out_dir)
    tokenizer = build_tokenizer(vocab, corpus, bpe_size, phrases)
    config = tiny_config(family, tokenizer, **overrides)
    auto = AutoModelForCausalLM if family == "qwen3" else AutoModelForImageTextToText
    with torch.random.fork_rng(devices=[]), torch.device(device):  # the caller's RNG untouched
        model = auto.from_config(config, dtype=torch.float32)
    init_weights_(model, seed, init_std, head_init_std)
    if save_dtype != torch.float32:
        model = model.to(save_dtype)
    ids = _token_ids(tokenizer)
    model.generation_config = GenerationConfig(
        bos_token_id=ids["bos_token_id"],
        pad_token_id=ids["pad_token_id"],
        eos_token_id=[ids["eos_token_id"], ids["pad_token_id"]],
    )

    def write(directory: Path) -> None:
        model.save_pretrained(directory)
        if family == "qwen3":
            tokenizer.save_pretrained(directory)
        else:
            build_processor(family, tokenizer).save_pretrained(directory)

    try:
        with atomic_dir(out) as tmp:  # an interrupted build leaves no half-written model directory
            write(tmp)
    except OSError:  # out exists: refused up front, or published by another build meanwhile
        if not _holds_the_same_build(out, write):
            raise
    return out


def _holds_the_same_build(out: Path, write) -> bool:
    """Whether the complete model directory ``out`` holds byte for byte what ``write`` writes
    (the build is deterministic: a concurrent build of the same model wrote the same files)."""
    if not (out / "config.json").is_file():
        return False
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.", suffix=".check", dir=out.parent) as tmp:
        write(Path(tmp))
        ours = sorted(str(p.relative_to(tmp)) for p in Path(tmp).rglob("*") if p.is_file())
        theirs = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
        return ours == theirs and all(filecmp.cmp(Path(tmp) / f, out / f, shallow=False) for f in ours)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m soft_spatial.models.tiny", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output model directory")
    parser.add_argument("--family", choices=FAMILIES, default="qwen3_vl")
    parser.add_argument("--vocab", choices=VOCABS, default="qwen")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    path = build_tiny_model(args.out, family=args.family, vocab=args.vocab, seed=args.seed)
    print(path)


if __name__ == "__main__":
    main()
