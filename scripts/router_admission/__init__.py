"""The parts of ``scripts/experiment_admission.py``: what every experiment shares (the
router's configuration and the load client with its per-second counts; the routers
themselves are started by :func:`scripts.fig14.runs.experiment_router`), then the
experiments, each a run and a report (its table and figures): ``step`` (every policy
through one load step), ``classes`` and ``floor`` (replies under class-based admission,
the single-class figure) and ``degrade`` (a chain of routers). The script reads its
subcommand and flags, runs one of them and writes its section."""
