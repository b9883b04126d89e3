"""Stage the GPU kit's Python packages here and install them on a lent GPU machine (standard library
only on the device).

A lent GPU machine has no network and receives at most 64 MiB of files per call, the project tree
included. So the packages the checks need beyond its image travel as *packs*: ready ``site/``
directories (wheels unpacked and trimmed here) compressed with xz, which packs installed code far
better than wheels do. Two packs, installed into separate directories and used together:

  sglang  SGLang 0.5.12 with its CUDA kernels trimmed to what runs on an H100, flashinfer with the
          sources of its on-the-fly RMSNorm build, transformers 5.10.4 + tokenizers, libnuma.so.1
          and the pure-Python packages SGLang's engine imports: stages a, d, f
  verl    verl 0.9.1, Ray, tensordict, hydra, ... (what C imports, less the sglang pack's):
          stages c and e, together with the sglang pack

    python scripts/gpu/kit.py stage --stages a,b,c,d,e,f    # here: download, trim, pack, plan calls
    python3 scripts/gpu/kit.py install --from .gpukit/send/01 --stages d   # there, once per call

``stage`` writes ``.gpukit/send/NN/``: one directory per device call, each at most the call's budget
(64 MiB less the project tree and a margin), holding its pack files (a pack too large for one call
travels in parts) and the whole manifest (sha256 of every pack and part). ``install`` checks every
piece that came with the call against the manifest (a corrupt one is named and nothing changes),
keeps pieces in a store that outlives the call while the machine is held
(``/var/tmp/soft_spatial_gpukit``), reassembles and unpacks each pack once all its pieces have
arrived, and prints the ``export`` lines (also written to ``<store>/env.sh``). A second run is a
no-op. It exits 0 when the asked stages are ready, 3 while pieces are missing. The stages are
named by the letters they had (a, b, c: the plan's jobs A, B, C; d: D and G; e: E; f: F and X).

This script is the command line; the work is done in ``gpukit/``, a module a step (docs/gpu.md,
"The kit"; standard library only where the device runs it).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpukit.calls import ROOT
from gpukit.install import STORE, install
from gpukit.staging import stage


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("stage", help="download, trim and pack; plan the device calls (here)")
    st.add_argument("--stages", default="a,b,c,d,e,f", help="check stages to stage packs for")
    st.add_argument("--out", default=str(ROOT / ".gpukit"))
    st.add_argument("--preset", type=int, default=9, help="xz preset (0-9)")
    ins = sub.add_parser("install", help="check and unpack what arrived (on the device)")
    ins.add_argument("--from", dest="src", help="a send/NN directory that came with this call")
    ins.add_argument("--stages", help="stages to report on (default: all)")
    ins.add_argument("--store", default=str(STORE))
    a = ap.parse_args(argv)
    if a.cmd == "stage":
        stage(Path(a.out), a.stages.split(","), a.preset)
        return 0
    return install(Path(a.store), Path(a.src) if a.src else None,
                   a.stages.split(",") if a.stages else None)


if __name__ == "__main__":
    sys.exit(main())
