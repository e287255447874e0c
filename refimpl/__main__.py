"""``python -m refimpl``: the same as the ``refimpl`` command."""

from refimpl.cli import console

if __name__ == "__main__":
    console()
