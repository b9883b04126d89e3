"""``python -m soft_spatial.lab.softness``: the softness experiment's commands, by the first argument.

    python -m soft_spatial.lab.softness run budget=paths [seed=S] [out=DIR] [key=value ...]
        Phase 0's gates (and Phase 1's arms) through the learning experiment's runner (:mod:`.phase0`)
    python -m soft_spatial.lab.softness SEED_DIR [SEED_DIR ...] --out DIR
        Phase 1's analysis and the registered decision (:mod:`.decision`; a seed directory named
        ``run`` is given as ``./run``)

Stage 0 is ``python -m soft_spatial.lab.softness.stage0 SEED_DIR`` (:mod:`.stage0`), the reading
diagnostic ``python -m soft_spatial.lab.softness.reading SEED_DIR`` (:mod:`.reading`).
"""
import sys

if __name__ == "__main__":
    if sys.argv[1:2] == ["run"]:
        del sys.argv[1]  # Hydra reads the overrides from sys.argv
        from soft_spatial.lab.softness.phase0 import main
    else:
        from soft_spatial.lab.softness.decision import main
    main()
