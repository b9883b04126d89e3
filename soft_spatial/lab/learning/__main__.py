"""``python -m soft_spatial.lab.learning``: the learning experiment (:mod:`.experiment`)."""
from soft_spatial.lab.learning.experiment import main

if __name__ == "__main__":
    main()
