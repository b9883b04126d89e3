"""``python -m soft_spatial.stats``: the command; the code is :mod:`soft_spatial.lab.paper.calibration`."""
from soft_spatial.lab.paper.calibration.cli import main

if __name__ == "__main__":
    main()
