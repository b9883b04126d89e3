"""What a piece of the GPU kit's work runs with: where it runs, its scratch and report, its
deadline; the models F, D and G measure (the ``model`` jobs, whose result is :class:`ModelFacts`);
environment changes scoped to one engine."""
from __future__ import annotations

import gc
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from soft_spatial_bench.gpu.report import LiveReport

__all__ = ["KitContext", "ModelFacts", "env_vars", "free_memory", "wait_device_free",
           "shared_model", "MODEL_DIR", "CONTROLLER", "model_8b", "MODEL_8B_DIR", "measure_model",
           "render_model", "DRY_VOCAB"]

MODEL_DIR = "model"          # under KitContext.work: the model F and D share
MODEL_8B_DIR = "model-8b"    # Qwen3-VL-8B-Thinking's shape without weights (SGLang's dummy load)
CONTROLLER = "adaptsoft.pt"  # beside it: a random AdaptSoft (τ varies by step)
#: a dry run's vocabulary, both models (E's dry run has it too): the tiny models' 538-token BPE
#: with the Qwen special tokens. Qwen's 151,669 tokens cost ~2 s of CPU per tokenizer load in
#: transformers 5, three loads per engine (its tokenizer manager's processor, its scheduler's, its
#: detokenizer's tokenizer), and 75 MB of embedding and head at the tiny width: 70 s of CPU in the
#: plan's dry run (2026-12-07). No code path depends on the vocabulary's size; a GPU builds Qwen's
#: (the published shapes' own).
DRY_VOCAB = "small"


@dataclass
class KitContext:
    """dry_run: tiny sizes on the CPU; device: "cuda" or "cpu"; work: scratch that outlives a
    child process (models, references; never sent back); out: what comes back (report, results,
    log, E's logs); deadline_at: wall time (epoch s) every piece of work must end by."""

    dry_run: bool
    device: str
    work: Path
    out: Path
    deadline_at: float
    report: LiveReport

    def remaining(self) -> float:
        return self.deadline_at - time.time()

    @property
    def dtype(self):
        """The dtype a job computes in unless it says otherwise: bf16 on a GPU, fp32 on the CPU."""
        import torch
        return torch.float32 if self.dry_run else torch.bfloat16


@dataclass
class ModelFacts:
    """A ``model`` job's result: the shape of the model built or found (``model``: "2b" or "8b"),
    its weights, the seconds it took."""

    model: str
    hidden: int
    layers: int
    head_dim: int
    vision_depth: int
    mrope_section: list
    tied: bool
    weights: str
    seconds: float

    @classmethod
    def of(cls, model: str, config, weights: str, t0: float) -> "ModelFacts":
        text = config.text_config
        return cls(model, text.hidden_size, text.num_hidden_layers, text.head_dim,
                   config.vision_config.depth, list(text.rope_parameters["mrope_section"]),
                   bool(config.tie_word_embeddings), weights, round(time.perf_counter() - t0, 1))


@contextmanager
def env_vars(values: dict[str, str]):
    """Set environment variables while a block runs (processes started inside inherit them)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def free_memory() -> None:
    """After an engine or a model: the garbage that holds CUDA tensors collected, the cache given
    back. Without CUDA (a dry run) there is nothing to give back, and a collection in the kit's
    child, SGLang and transformers loaded, costs about 0.4 s of CPU."""
    import torch
    if torch.cuda.is_available():
        gc.collect()
        torch.cuda.empty_cache()


def wait_device_free(fraction: float = 0.8, timeout: float = 30.0) -> float:
    """After an engine's shutdown: wait until at least ``fraction`` of the device's memory is free
    again (its scheduler processes are killed; the driver frees their memory as they exit), at most
    ``timeout`` seconds, so the next engine's ``mem_fraction_static`` finds it. Returns the free
    fraction (1.0 without CUDA)."""
    import torch
    if not torch.cuda.is_available():
        return 1.0
    end = time.time() + timeout
    while True:
        free, total = torch.cuda.mem_get_info()
        if free / total >= fraction or time.time() > end:
            return free / total
        time.sleep(0.5)


def shared_model(ctx: KitContext) -> tuple[Path, Path, ModelFacts]:
    """(model directory, controller checkpoint, facts) of the model F and D measure, built once
    per machine in ``ctx.work`` (a second call finds it: the directory appears whole or not at
    all). On a GPU: Qwen3-VL-2B's published shape (:data:`~soft_spatial.models.shapes.QWEN3_VL_2B`)
    with the parity weights (:func:`~soft_spatial.models.shapes.parity_init`, untied), built
    and drawn on the device and saved in bf16 (every engine then reads the same bf16-exact
    weights, fp32 and fp64 ones included); in a dry run the tiny Qwen3-VL on the CPU with the
    small vocabulary (:data:`DRY_VOCAB`)."""
    import torch
    from transformers import AutoConfig

    from soft_spatial_bench.workloads import random_controller
    from soft_spatial.models import build_tiny_model
    from soft_spatial.models.shapes import QWEN3_VL_2B, check_config, parity_init
    from soft_spatial.models.tiny import DEFAULT_HEAD_INIT_STD, DEFAULT_INIT_STD

    model, ctrl = ctx.work / MODEL_DIR, ctx.work / CONTROLLER
    t0 = time.perf_counter()
    built = not (model / "config.json").is_file()
    if built:
        if ctx.dry_run:
            shape = dict(init_std=DEFAULT_INIT_STD, head_init_std=DEFAULT_HEAD_INIT_STD)
            build_tiny_model(model, family="qwen3_vl", vocab=DRY_VOCAB, **shape)
        else:
            shape = dict(QWEN3_VL_2B, **parity_init(QWEN3_VL_2B["hidden_size"]),
                         tie_word_embeddings=False)
            build_tiny_model(model, family="qwen3_vl", vocab="qwen", device=ctx.device,
                             save_dtype=torch.bfloat16, **shape)
        free_memory()
    config = check_config(AutoConfig.from_pretrained(model), "the kit's shared model")
    if not ctrl.is_file():
        random_controller(config.text_config.hidden_size).save(ctrl)
    size = sum(f.stat().st_size for f in model.glob("*.safetensors"))
    weights = f"{size / 2 ** 30:.2f} GiB, {'built' if built else 'found'}"
    return model, ctrl, ModelFacts.of("2b", config, weights, t0)


def model_8b(ctx: KitContext) -> tuple[Path, Path, ModelFacts]:
    """(model directory, controller checkpoint, facts) of Qwen3-VL-8B-Thinking's published shape
    (:data:`~soft_spatial.models.shapes.QWEN3_VL_8B`) without weights: the config, tokenizer and
    processor only; its engines load random weights themselves (SGLang's ``load_format=dummy``,
    the same weights for every engine), so nothing of 17.5 GB is drawn or written. In a dry run
    the tiny shape with the small vocabulary (:data:`DRY_VOCAB`), the same way."""
    from transformers import AutoConfig, GenerationConfig

    from soft_spatial_bench.workloads import random_controller
    from soft_spatial.models.shapes import QWEN3_VL_8B, check_config
    from soft_spatial.models.tiny import build_processor, build_tokenizer, tiny_config

    model, ctrl = ctx.work / MODEL_8B_DIR, ctx.work / ("8b-" + CONTROLLER)
    t0 = time.perf_counter()
    if not (model / "config.json").is_file():
        tok = build_tokenizer(DRY_VOCAB if ctx.dry_run else "qwen")
        config = tiny_config("qwen3_vl", tok, **({} if ctx.dry_run else QWEN3_VL_8B))
        config.architectures = ["Qwen3VLForConditionalGeneration"]  # what a checkpoint names
        tmp = model.with_name(model.name + ".tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        config.save_pretrained(tmp)
        GenerationConfig(eos_token_id=[tok.eos_token_id], pad_token_id=tok.pad_token_id,
                         bos_token_id=tok.bos_token_id).save_pretrained(tmp)
        build_processor("qwen3_vl", tok).save_pretrained(tmp)
        tmp.replace(model)
    config = check_config(AutoConfig.from_pretrained(model), "the kit's 8B-shaped model")
    if not ctrl.is_file():
        random_controller(config.text_config.hidden_size).save(ctrl)
    return model, ctrl, ModelFacts.of("8b", config, "SGLang's dummy load (random, no file)", t0)


def measure_model(ctx: KitContext, job) -> ModelFacts:
    """The ``model`` jobs: build (2B) or write (8B, no weights) the model the engines share."""
    return (model_8b if job.args.get("model", "2b") == "8b" else shared_model)(ctx)[2]


def render_model(facts: ModelFacts) -> list[str]:
    shape = {"2b": "Qwen3-VL-2B", "8b": "Qwen3-VL-8B-Thinking"}[facts.model]
    return [f"{shape}'s published shape (tiny in a dry run), random weights: "
            + ", ".join(f"{k} {v}" for k, v in asdict(facts).items() if k != "model")]
