"""The method, in pure PyTorch (docs/design.md §2–3). Imports neither verl nor sglang.

Each equation lives in exactly one place:
  mixture.py    §2.1–2.4  candidates, Gumbel perturbation, mixture weights, soft embedding, spine,
                          normalised top-K entropy
  density.py    §2.6      Gumbel log-density of recorded scores (eq. 5), and what a per-candidate
                          log-prob difference does to it (the rollout/replay gap)
  kl.py         §2.8      KL to the reference at a soft step (candidate KL, density reading)
  controller.py §2.5,2.7  AdaptSoft and its straight-through replay temperature
  alignment.py  §2.9–2.10 exact gradient-alignment scores, scaling, centring, surrogate
  noise.py      §2.2      the rollout noise: the noise key, the seeds, the counter-based
                          uniforms, the key's names on the wire
  trace.py      §3        the per-step rollout record and its collation
  logits.py               the output head's logits in fp32 when the run asks (DensityConfig)
  config.py               typed settings with the paper's defaults

The names below are imported on first use (PEP 562): ``softthink.settings`` (the typed settings
a command checks first) and ``softthink.config`` import no torch, so a command refusing its
settings answers without torch's import.
"""
from importlib import import_module

#: the module that defines each of the package's names
_MODULES = {
    "alignment": "AlignmentScaler SparseGrad alignment_loss alignment_scores all_gather_rows center_per_rollout "
                 "controller_surrogate select_reference world_size",
    "config": "AdaptSoftConfig AlignmentConfig DensityConfig KLConfig ReplayCheckConfig SamplingConfig "
              "SoftThinkingConfig check_field_types from_mapping",
    "controller": "AdaptSoft ControllerState",
    "density": "StepLikelihood candidate_logp gumbel_log_density log_density_gap soft_step_log_density "
               "step_likelihood step_log_likelihood token_log_prob",
    "kl": "candidate_kl gumbel_density_kl",
    "mixture": "candidates gumbel_from_uniform mixture_weights normalized_entropy perturb "
               "record_input_embeddings record_weights soft_embedding soft_step sort_by_score spine",
    "noise": "NoiseKey noise_uniforms seed_tensor",
    "trace": "SoftTrace StepRecord TraceRecorder collate_traces uncollate_traces",
}
_NAMES = {name: module for module, names in _MODULES.items() for name in names.split()}

__all__ = sorted(_NAMES)


def __getattr__(name):
    if name in _NAMES:
        return getattr(import_module(f"{__name__}.{_NAMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
