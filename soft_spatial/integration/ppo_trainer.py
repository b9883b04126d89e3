"""verl's ``RayPPOTrainer`` with soft traces (docs/design.md §5).

Every generation batch is tagged with its rows' noise keys first (:func:`tag_noise_keys`), so the
rollouts' noise is a function of the run's schedule (docs/design.md §2.2). Three steps change:
before the first log-prob pass the rollout's SoftTraces are collated into
``trace_*`` tensors aligned with the response positions (with the spine check), the reference pass
also keeps the candidate log-probs with ``rollout.custom.kl.over=candidates`` (as
``ref_cand_logp``), and the actor update reports the rollout metrics (τ statistics, entropy,
soft-step share, think length, never closed rate) and the rollout/replay consistency of the
per-step likelihoods. Validation generations logged to a tracker (``trainer.log_val_generations``)
carry their τ per soft step after the text.

Each checkpoint carries the soft settings that trained it (``global_step_N/soft_settings.yaml``,
what export copies). Two guarantees of a run are kept here, at the loop: a run whose checkpoint already reached
``total_training_steps`` trains nothing (verl 0.9.1's ``fit`` tests the budget only after training
one more step), and a step's checkpoint is written after its metrics are logged (verl writes it
before: a run killed in between resumed after a step whose metrics were lost). A run killed after
logging a step but before its checkpoint resumes from the checkpoint before and trains that step
again; the entry point moves the lost run's lines aside (``trainer.run_dir.keep_metrics_until``).
A run resumed from the checkpoint of an epoch's last step draws its next epoch in the order the
uninterrupted run does (verl 0.9.1 restarts the order there: ``restore_epoch_boundary_order``).
"""
from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from verl.trainer.ppo.ray_trainer import RayPPOTrainer

from soft_spatial.integration.collate import attach_traces
from soft_spatial.softthink.noise import NOISE_KEY, NOISE_ROWS, NoiseKey
from soft_spatial.softthink.trace import TRACE_FIELD
from soft_spatial.softthink.settings import SETTINGS_FILE, SoftSettings
from soft_spatial.softthink import SoftTrace

from soft_spatial.integration.consistency import (EXCEEDED, check_replay, replay_dtype,
                                                  replay_metrics)
from soft_spatial.compat.verl.trainer import (after_step_logged, before_each_generation,
                                              ref_log_prob_outputs, restore_epoch_boundary_order,
                                              validation_outputs)
from soft_spatial.infra.run_dir import finished, resume_step

__all__ = ["SoftRayPPOTrainer", "tau_note", "annotate_in_order", "tag_noise_keys"]


def tau_note(trace: SoftTrace) -> str:
    """The line appended to a logged generation: τ at each soft step, in step order."""
    taus = trace.tau[trace.soft.bool()].tolist()
    return f"[{len(taus)} soft steps; tau per soft step: {' '.join(f'{t:.3f}' for t in taus)}]"


def annotate_in_order(outputs: Sequence[str], generated: Sequence[tuple[str, str]]) -> list[str]:
    """``outputs`` (the texts verl logs, in generation order) with the note of their generated row.

    ``generated`` holds (text, note) for every generated row, in order, including the padding rows
    verl adds to each batch and drops afterwards: a row whose text is not the next output's is such
    a row and is skipped. An output without a matching row is left as it is."""
    out, j = [], 0
    for text in outputs:
        k = j
        while k < len(generated) and generated[k][0] != text:
            k += 1
        if k < len(generated):
            out.append(f"{text}\n\n{generated[k][1]}")
            j = k + 1
        else:
            out.append(text)
    return out


def tag_noise_keys(trainer) -> None:
    """Add two columns to every generation batch the trainer's rollout manager sends
    (:func:`~soft_spatial.compat.verl.trainer.before_each_generation`): each row's noise key
    (:class:`~soft_spatial.softthink.noise.NoiseKey`, as text: training or validation,
    ``trainer.global_steps``, the how-many-th batch of that step, the row's position) and the
    batch's size when one rollout server receives all of it (else 0; the local_soft server then
    decodes it in batches that do not depend on arrival times). Keys repeat only across runs: a
    resumed run numbers its step's batches as the uninterrupted run did."""
    replicas = len(trainer.llm_server_manager.get_replicas())
    calls: dict[tuple, int] = defaultdict(int)

    def tag(prompts) -> None:
        validate = bool(prompts.meta_info.get("validate", False))
        step = int(trainer.global_steps)
        call = calls[(validate, step)]
        calls[(validate, step)] += 1
        n = len(prompts)
        prompts.non_tensor_batch[NOISE_KEY] = np.array(
            [str(NoiseKey(validate, step, call, i)) for i in range(n)], dtype=object)
        prompts.non_tensor_batch[NOISE_ROWS] = np.full(n, n if replicas == 1 else 0,
                                                       dtype=np.int64)

    before_each_generation(trainer, tag)


class SoftRayPPOTrainer(RayPPOTrainer):
    _soft_metrics: dict = {}
    _save_when_logged: int | None = None

    def fit(self):
        trainer = self.config.trainer
        step = resume_step(trainer.default_local_dir, str(trainer.resume_mode),
                           trainer.get("resume_from_path"))
        note = finished(step, self.total_training_steps, trainer.default_local_dir)
        if note:  # the budget is known here even when verl derived it from the data
            print(note)
            return
        with after_step_logged(self._save_logged_step):
            return super().fit()

    def _load_checkpoint(self):
        # verl restarts the data order at an epoch's end: restored as the uninterrupted run has it.
        # verl has set global_steps from the folder it loaded (0 when it loaded none: nothing done)
        out = super()._load_checkpoint()
        trainer = self.config.trainer
        folder = (trainer.resume_from_path if str(trainer.resume_mode) == "resume_path"
                  else os.path.join(trainer.default_local_dir, f"global_step_{self.global_steps}"))
        restore_epoch_boundary_order(self, os.path.abspath(folder))
        return out

    def _save_checkpoint(self):
        # verl calls this before logging the step's metrics: saved once they are logged instead
        self._save_when_logged = self.global_steps

    def _save_logged_step(self, step: int) -> None:
        if self._save_when_logged == step:
            self._save_when_logged = None
            # the settings that trained this checkpoint go with it, before verl's tracker names it:
            # export copies them (a run directory trained later under other settings keeps each
            # checkpoint's own)
            folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{step}")
            os.makedirs(folder, exist_ok=True)
            self._soft_settings().save(os.path.join(folder, SETTINGS_FILE))
            super()._save_checkpoint()

    def init_workers(self):
        super().init_workers()
        tag_noise_keys(self)

    def _compute_old_log_prob(self, batch):
        self._soft_metrics = dict(attach_traces(batch))
        for key in ("acc", "format"):  # reward components returned by soft_spatial.data.reward
            if key in batch.non_tensor_batch:
                vals = np.asarray(batch.non_tensor_batch[key], dtype=np.float64)
                self._soft_metrics[f"reward/{key}_mean"] = float(vals.mean())
        old, mfu = super()._compute_old_log_prob(batch)
        if "rollout_log_probs" in batch.batch.keys():
            replay = replay_metrics(batch.batch["rollout_log_probs"], old.batch["old_log_probs"],
                                    batch.batch["response_mask"], batch.batch["trace_soft"])
            self._soft_metrics.update(replay)
            self._soft_metrics[EXCEEDED] = check_replay(
                replay, self._soft_settings().replay_check, self.global_steps,
                replay_dtype(self.config))
        # no spine metric: attach_traces' spine check (integration/collate.py::check_spine) already
        # raised on the first record whose spine is not its response token (docs/design.md §3)
        return old, mfu

    def _soft_settings(self) -> SoftSettings:
        """The run's soft settings (``rollout.custom``, checked by the entry point), parsed once."""
        if getattr(self, "_parsed_soft_settings", None) is None:
            self._parsed_soft_settings = SoftSettings.from_rollout(
                self.config.actor_rollout_ref.rollout)
        return self._parsed_soft_settings

    def _compute_ref_log_prob(self, batch):
        attach_traces(batch)  # no-op when already attached
        if self._soft_settings().kl.over == "candidates":
            return ref_log_prob_outputs(self, batch, {"cand_logp": "ref_cand_logp"})
        return super()._compute_ref_log_prob(batch)

    def _validate(self, *args, **kwargs):
        self._val_notes: list[tuple[str, str]] = []

        def keep(out):
            raw = out.non_tensor_batch.get(TRACE_FIELD)
            if raw is None:
                return
            texts = [self.tokenizer.decode(ids, skip_special_tokens=True)  # as verl decodes them
                     for ids in out.batch["responses"]]
            self._val_notes.extend((t, tau_note(SoftTrace.from_lists(r))) for t, r in zip(texts, raw))

        with validation_outputs(self, keep):
            return super()._validate(*args, **kwargs)

    def _maybe_log_val_generations(self, inputs, outputs, scores):
        outputs = annotate_in_order(outputs, getattr(self, "_val_notes", []))
        super()._maybe_log_val_generations(inputs=inputs, outputs=outputs, scores=scores)

    def _update_actor(self, batch):
        out = super()._update_actor(batch)
        out.meta_info["metrics"].update(self._soft_metrics)
        return out
