"""verl's ``RayPPOTrainer`` with soft traces (DESIGN.md §5).

Only three steps change: before the first log-prob pass the rollout's SoftTraces are collated into
``trace_*`` tensors aligned with the response positions (with the spine check), the reference pass
also keeps the candidate log-probs with ``rollout.custom.kl.over=candidates`` (as
``ref_cand_logp``), and the actor update reports the rollout metrics (τ statistics, entropy,
soft-step share, think length, never closed rate) and the rollout/replay consistency of the
per-step likelihoods.
"""
from __future__ import annotations

import numpy as np

from verl.trainer.ppo.ray_trainer import RayPPOTrainer

from soft_spatial.rollout.collate import attach_traces

from .verl_compat import ref_log_prob_outputs

__all__ = ["SoftRayPPOTrainer"]


class SoftRayPPOTrainer(RayPPOTrainer):
    _soft_metrics: dict = {}

    def _compute_old_log_prob(self, batch):
        self._soft_metrics = dict(attach_traces(batch))
        for key in ("acc", "format"):  # reward components returned by soft_spatial.reward
            if key in batch.non_tensor_batch:
                vals = np.asarray(batch.non_tensor_batch[key], dtype=np.float64)
                self._soft_metrics[f"reward/{key}_mean"] = float(vals.mean())
        old, mfu = super()._compute_old_log_prob(batch)
        if "rollout_log_probs" in batch.batch.keys():
            mask = batch.batch["response_mask"].bool()
            diff = (batch.batch["rollout_log_probs"] - old.batch["old_log_probs"]).abs()[mask]
            soft = batch.batch["trace_soft"].bool()[mask]
            if diff.numel():
                self._soft_metrics["soft/replay_max_abs_diff"] = float(diff.max())
                if soft.any():
                    self._soft_metrics["soft/replay_max_abs_diff_soft"] = float(diff[soft].max())
        resp = batch.batch["responses"]
        spine = batch.batch["trace_topk_ids"][..., 0]
        valid = batch.batch["trace_mask"]
        self._soft_metrics["soft/spine_match_rate"] = float(
            (spine[valid] == resp[valid]).float().mean()) if valid.any() else 1.0
        return old, mfu

    def _compute_ref_log_prob(self, batch):
        attach_traces(batch)  # no-op when already attached
        kl = (self.config.actor_rollout_ref.rollout.get("custom") or {}).get("kl") or {}
        if kl.get("over", "likelihood") == "candidates":
            return ref_log_prob_outputs(self, batch, {"cand_logp": "ref_cand_logp"})
        return super()._compute_ref_log_prob(batch)

    def _update_actor(self, batch):
        out = super()._update_actor(batch)
        out.meta_info["metrics"].update(self._soft_metrics)
        return out
