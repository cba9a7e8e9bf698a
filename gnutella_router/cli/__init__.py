"""The ``gnutella-router`` command line: one module per family of commands.

:mod:`.main` builds the parser (``run``, ``decode``, ``sample``, ``replay``,
``trace-summary``) and dispatches; :mod:`.load` adds ``load`` and ``echo``, :mod:`.dump`
adds ``dump``, :mod:`.testnet` adds ``testnet``. Commands parse and report; the work is
done by the daemon and the tools below them.
"""
