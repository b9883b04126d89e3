"""Write the synthetic benchmark fixtures: ``python scripts/make_fixtures.py OUT_DIR``.

Thin wrapper around `soft_spatial.data.fixtures.write_fixtures` (tests call that directly).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from soft_spatial.data.fixtures import write_fixtures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="directory to write into (created if needed)")
    fixtures = write_fixtures(parser.parse_args().out)
    for name in ("omnispatial_test", "omnispatial_train", "spatialab", "mindcube"):
        print(f"{name}: {getattr(fixtures, name)}")


if __name__ == "__main__":
    main()
