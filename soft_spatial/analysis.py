"""``python -m soft_spatial.analysis``: the command; the code is :mod:`soft_spatial.lab.paper.analysis`."""
from soft_spatial.lab.paper.analysis.cli import main

if __name__ == "__main__":
    main()
