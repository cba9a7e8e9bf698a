"""The parts of ``scripts/experiment_admission.py``: what every experiment shares (the
router's configuration, the child router, the load client and its per-second counts),
then the experiments themselves with their figures and written sections: ``step``
(every policy through one load step), ``classes`` and ``floor`` (replies under
class-based admission, the single-class figure) and ``degrade`` (a chain of routers).
The script reads its subcommand and flags and runs one of them."""
