"""Two builds of one tiny model path at once (issue 34, item 19: two ``model.build_tiny=true``
commands sharing a path): both succeed with the same files, since the build is deterministic;
a path that holds another model is still refused."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

BUILD = dict(family="qwen3", vocab="small")


def _files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _meet_in_the_write_step(monkeypatch, parties: int = 2) -> list:
    """The first ``parties`` weight writes (save_pretrained) wait for one another: every build is
    inside its write step at once, none has published its directory. Later writes pass."""
    from transformers import PreTrainedModel

    barrier, lock, seen = threading.Barrier(parties, timeout=120), threading.Lock(), []
    original = PreTrainedModel.save_pretrained

    def save_pretrained(self, *args, **kwargs):
        with lock:
            seen.append(threading.get_ident())
            wait = len(seen) <= parties
        if wait:
            barrier.wait()  # a safety timeout only: on a broken build the other never arrives
        return original(self, *args, **kwargs)

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", save_pretrained)
    return seen


def _build_concurrently(out: Path, n: int = 2) -> list:
    from soft_spatial.models import build_tiny_model

    results: list = [None] * n

    def build(i):
        try:
            results[i] = build_tiny_model(out, **BUILD)
        except BaseException as e:  # reported by the test
            results[i] = e

    threads = [threading.Thread(target=build, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.mark.parametrize("existing_empty_dir", [False, True])  # a new path, or a made empty one
def test_two_concurrent_builds_of_one_path_both_succeed_with_the_same_files(
        tmp_path, monkeypatch, existing_empty_dir):
    from soft_spatial.models import build_tiny_model

    reference = build_tiny_model(tmp_path / "reference" / "m", **BUILD)
    out = tmp_path / "shared" / "m"
    if existing_empty_dir:
        out.mkdir(parents=True)
    seen = _meet_in_the_write_step(monkeypatch)
    results = _build_concurrently(out)
    assert len(set(seen[:2])) == 2  # both builds were inside their write step together
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors
    assert results == [out, out]
    assert _files(out) == _files(reference)
    assert sorted(p.name for p in out.parent.iterdir()) == ["m"]  # no temporary directory left


def test_a_path_holding_another_model_is_still_refused(tmp_path, monkeypatch):
    from soft_spatial.models import build_tiny_model

    out = build_tiny_model(tmp_path / "m", **BUILD)
    before = _files(out)
    with pytest.raises(FileExistsError, match="already exists"):
        build_tiny_model(out, **BUILD, seed=1)  # other weights
    assert _files(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    assert build_tiny_model(out, **BUILD) == out  # the same build: it is there, use it
    assert _files(out) == before
