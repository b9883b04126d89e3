"""``python -m soft_spatial.stats``: the command; the code is :mod:`soft_spatial.lab.stats`."""
from soft_spatial.lab.stats.cli import main

if __name__ == "__main__":
    main()
