"""``python -m soft_spatial.data.synthetic --out DIR ...``: write the benchmark (:mod:`.cli`)."""
from soft_spatial.data.synthetic.cli import main

if __name__ == "__main__":
    main()
