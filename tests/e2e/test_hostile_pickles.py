"""Every loader of a file that may come from elsewhere, fed pickles that would run code: the code
never runs and the load fails (issue 34). Loaders: a controller checkpoint (evaluation, the warm
start's and the trainer's, ``AdaptSoft.read_checkpoint``), a training resume
(``AdaptSoftTrainer.load``), the controller blob a weight sync carries to SGLang
(``decode_controller``), the warm start's resume state (``lab.warmstart.train``) and export's
checkpoint shards (``compat.verl.merger.weights_only_loads``, what verl's merger runs under).
Payloads: builtins, ``os``, ``subprocess``, ``exec`` — generated, and nested at any depth of an
otherwise valid file. (``test_lint.py`` checks that no other ``torch.load`` exists.)"""
from __future__ import annotations

import io
import os
import pickle
import subprocess
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soft_spatial_bench.workloads import random_controller


class _Payload:
    """Unpickling calls ``how`` to create ``marker`` (what a crafted checkpoint could do)."""

    def __init__(self, how: str, marker: Path):
        self.how, self.marker = how, str(marker)

    def __reduce__(self):
        if self.how == "open":
            return (open, (self.marker, "w"))
        if self.how == "os.system":
            return (os.system, (f"touch {self.marker}",))
        if self.how == "subprocess":
            return (subprocess.call, (["touch", self.marker],))
        return (exec, (f"open({self.marker!r}, 'w')",))


def _nest(obj, depth: int):
    for i in range(depth):
        obj = {"state_dict": {"w": torch.zeros(2)}, f"k{i}": [obj]} if i % 2 else [obj]
    return obj


def _controller_blob(bad):
    ctrl = random_controller(16, seed=1, width=8)
    return {"config": ctrl.config_dict(), "state_dict": ctrl.state_dict(), "extra": bad}


def _read_checkpoint(path: Path):
    from soft_spatial.softthink import AdaptSoft
    AdaptSoft.read_checkpoint(path)


def _decode_controller(path: Path):
    from soft_spatial.engines.sglang.client import decode_controller
    decode_controller(torch.frombuffer(bytearray(path.read_bytes()), dtype=torch.uint8))


def _trainer_resume(path: Path):
    from soft_spatial.actor.adaptsoft_trainer import AdaptSoftTrainer
    AdaptSoftTrainer(random_controller(16, seed=1, width=8)).load(path)


def _warmstart_resume(path: Path):
    from soft_spatial.lab.learning.warmstart import WarmStartConfig, train
    cfg = WarmStartConfig(model_path=str(path.parent), data_root=str(path.parent), output_dir=str(path.parent))
    train(torch.nn.Linear(2, 2), [], cfg, pad_id=0, state_path=path)


def _export_shard(path: Path):
    from soft_spatial.compat.verl.merger import weights_only_loads
    with weights_only_loads():
        torch.load(path)  # what verl's merger calls on each shard


LOADERS = {"controller checkpoint": _read_checkpoint, "weight sync blob": _decode_controller,
           "training resume": _trainer_resume, "warm start resume": _warmstart_resume,
           "export shard": _export_shard}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(loader=st.sampled_from(sorted(LOADERS)),
       how=st.sampled_from(["open", "os.system", "subprocess", "exec"]),
       depth=st.integers(0, 4), wrapped=st.booleans())
def test_no_loader_runs_a_hostile_pickle(tmp_path_factory, loader, how, depth, wrapped):
    tmp = tmp_path_factory.mktemp("hostile")
    marker, path = tmp / "ran", tmp / "file.pt"
    bad = _nest(_Payload(how, marker), depth)
    with open(path, "wb") as f:
        torch.save(_controller_blob(bad) if wrapped else bad, f)
    with pytest.raises(Exception) as info:
        LOADERS[loader](path)
    assert not marker.exists(), f"{loader} ran the pickle's code ({how})"
    # refused as unsafe, not by some later, accidental error
    text = "".join(str(e) for e in (info.value, info.value.__cause__, info.value.__context__) if e)
    assert isinstance(info.value, pickle.UnpicklingError) or "code" in text or \
        "Weights only load failed" in text or "weights_only" in text, (loader, text[-800:])


def test_the_same_files_load_when_they_hold_only_weights(tmp_path):
    """The loaders above accept what they are meant to read (so the refusals are the payload's)."""
    path = tmp_path / "ok.pt"
    ctrl = random_controller(16, seed=1, width=8)
    torch.save({"config": ctrl.config_dict(), "state_dict": ctrl.state_dict()}, path)
    _read_checkpoint(path)
    _decode_controller(path)
    buf = io.BytesIO()
    torch.save({"w": torch.ones(3)}, buf)
    (tmp_path / "shard.pt").write_bytes(buf.getvalue())
    _export_shard(tmp_path / "shard.pt")
