"""Cross-rank pieces of the alignment on 2 gloo processes: reference all-gather, RMS averaging."""
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from soft_spatial.softthink import AlignmentScaler, all_gather_rows


def _worker(rank, world, init_file, out_dir):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    try:
        rows = torch.arange(3 * (rank + 1) * 2, dtype=torch.float32).view(-1, 2) + 100 * rank
        gathered = all_gather_rows(rows)
        ids = all_gather_rows(torch.full((rank + 1, 5), rank, dtype=torch.long))
        sc = AlignmentScaler(beta=0.5)
        alpha = torch.tensor([1.0, -1.0, 1.0]) * (rank + 1) if rank == 0 else torch.zeros(0)
        k1 = sc.update(alpha)  # rank 1 has no optimisation step: only rank 0's RMS counts
        k2 = sc.update(torch.full((2,), 4.0 * (rank + 1)))  # both ranks: mean of 4 and 8 = 6
        torch.save({"gathered": gathered, "ids": ids, "k1": k1, "k2": k2, "m": sc.m},
                   os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_two_rank_gather_and_scaler(tmp_path):
    mp.spawn(_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in range(2))
    want = torch.cat([torch.arange(6.).view(-1, 2), torch.arange(12.).view(-1, 2) + 100])
    assert torch.equal(r0["gathered"], want) and torch.equal(r1["gathered"], want)
    assert r0["ids"].tolist() == [[0] * 5, [1] * 5, [1] * 5] == r1["ids"].tolist()
    assert r0["k1"] == r1["k1"] == pytest.approx(1e-3 / 1.0)
    assert r0["m"] == r1["m"] == pytest.approx(0.5 * 1.0 + 0.5 * 6.0)
    assert r0["k2"] == r1["k2"] == pytest.approx(1e-3 / 3.5)
