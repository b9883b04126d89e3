"""``python -m soft_spatial.lab.learn``: the learning experiment's former name; it runs
``python -m soft_spatial.lab.learning`` (:mod:`soft_spatial.lab.learning`) with the same arguments."""
import sys

from soft_spatial.lab.learning.experiment import main

if __name__ == "__main__":
    print("python -m soft_spatial.lab.learn is now python -m soft_spatial.lab.learning", file=sys.stderr)
    main()
