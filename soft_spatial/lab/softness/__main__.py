"""``python -m soft_spatial.lab.softness SEED_DIR... --out DIR``: the softness experiment's Phase 1
analysis and its registered decision (:mod:`.decision`)."""
from soft_spatial.lab.softness.decision import main

if __name__ == "__main__":
    main()
