"""``python -m gnutella_router``: the command line (see :mod:`gnutella_router.cli`)."""

from gnutella_router.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
