"""``python -m soft_spatial.lab.learn``, the learning experiment's name until 729c705: refused in
one line naming ``python -m soft_spatial.lab.learning`` (nothing runs)."""
import sys

if __name__ == "__main__":
    sys.exit("python -m soft_spatial.lab.learn is now python -m soft_spatial.lab.learning "
             "(the same arguments; nothing was run)")
