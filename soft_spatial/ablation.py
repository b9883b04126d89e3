"""``python -m soft_spatial.ablation``: the command; the code is :mod:`soft_spatial.lab.paper.ablation`."""
from soft_spatial.lab.paper.ablation import main

if __name__ == "__main__":
    main()
