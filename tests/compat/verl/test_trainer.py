"""verl's trainer internals (soft_spatial/compat/verl/trainer.py) against verl's own code: the
reference log-probs with extra outputs, the rollout manager's method wrapped on the instance, the
file logger that appends. (The loader's state at an epoch's end, ``restore_epoch_boundary_order``:
tests/integration/test_ppo_trainer.py, against verl's own ``_load_checkpoint``.)"""
import json
import os

os.environ.setdefault("VERL_PLATFORM", "cpu")

from train_helpers import metrics_lines  # noqa: E402  (after the platform's variable)


def test_ref_log_prob_outputs_matches_upstream_and_keeps_extra_outputs():
    """ref_log_prob_outputs gives verl 0.9.1's ref_log_prob bit for bit (same fake worker, same
    batch) and also the extra per-token output, response-aligned like it."""
    import torch
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.utils import tensordict_utils as tu

    from soft_spatial.compat.verl.trainer import ref_log_prob_outputs

    b, p, r, k = 3, 4, 5, 2
    g = torch.Generator().manual_seed(0)
    attn = torch.zeros(b, p + r, dtype=torch.long)
    for i, (pl, rl) in enumerate([(4, 5), (2, 3), (3, 1)]):
        attn[i, p - pl: p + rl] = 1
    ids = torch.randint(1, 100, (b, p + r), generator=g) * attn
    batch = DataProto.from_dict(tensors=dict(
        input_ids=ids, attention_mask=attn, position_ids=(attn.cumsum(1) - 1).clamp(min=0),
        prompts=ids[:, :p], responses=ids[:, p:], response_mask=attn[:, p:]))

    class Worker:
        def compute_ref_log_prob(self, td):
            x = -td["input_ids"].values().double() / 100  # value of packed token j
            off = td["input_ids"].offsets()
            cand = torch.stack([x * (j + 1) for j in range(k)], -1)
            return tu.get_tensordict({
                "log_probs": torch.nested.nested_tensor_from_jagged(x, off),
                "cand_logp": torch.nested.nested_tensor_from_jagged(cand, off)})

    class Trainer:
        ref_in_actor = False
        ref_policy_wg = Worker()

    upstream = RayPPOTrainer._compute_ref_log_prob(Trainer(), batch)
    ours = ref_log_prob_outputs(Trainer(), batch, {"cand_logp": "ref_cand_logp"})
    ref = upstream.batch["ref_log_prob"]
    assert torch.equal(ours.batch["ref_log_prob"], ref)
    for j in range(k):
        assert torch.equal(ours.batch["ref_cand_logp"][..., j], ref * (j + 1))
    # response step t carries the value at the token before it (verl's shift by one)
    assert ref[0, 0] == -ids[0, p - 1] / 100


def test_before_each_generation_prepares_every_batch_on_the_instance_only():
    """The rollout manager's bound ``generate_sequences`` is wrapped on the instance: every batch
    goes through ``prepare`` first, then to verl's method, and the class is left alone."""
    from types import SimpleNamespace

    from verl.experimental.agent_loop.agent_loop import AgentLoopManager

    from soft_spatial.compat.verl.trainer import before_each_generation

    upstream = AgentLoopManager.generate_sequences
    seen = []

    class Manager(AgentLoopManager):
        def __init__(self):  # no workers: only the method lookup matters here
            pass

        def generate_sequences(self, prompts):
            seen.append(("generate", dict(prompts)))
            return "out"

    manager, other = Manager(), Manager()
    trainer = SimpleNamespace(async_rollout_manager=manager)
    before_each_generation(trainer, lambda batch: (seen.append(("prepare", dict(batch))),
                                                   batch.update(tag=len(seen))))
    assert manager.generate_sequences({"a": 1}) == "out"
    assert seen == [("prepare", {"a": 1}), ("generate", {"a": 1, "tag": 1})]
    assert "generate_sequences" in vars(manager) and "generate_sequences" not in vars(other)
    assert AgentLoopManager.generate_sequences is upstream


def test_verl_file_logger_appends(tmp_path, monkeypatch):
    from verl.utils import tracking

    from soft_spatial.compat.verl.trainer import append_file_logger
    path = tmp_path / "metrics.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    monkeypatch.setattr(tracking, "FileLogger", tracking.FileLogger)  # restored after the test
    path.write_text(metrics_lines([1, 2], "before"))
    upstream = tracking.FileLogger("p", "e")  # verl 0.9.1 truncates: the reason for the patch
    upstream.finish()
    assert path.read_text() == ""
    path.write_text(metrics_lines([1, 2], "before"))
    append_file_logger()
    append_file_logger()  # idempotent
    logger = tracking.FileLogger("p", "e")  # what Tracking builds for the "file" backend
    logger.log({"tag": "after"}, step=3)
    logger.finish()
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3]
