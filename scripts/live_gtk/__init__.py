"""The parts of ``scripts/live_gtk_check.py``: the processes and what is read of them
(:mod:`.network`), and the checks (:mod:`.checks`). The script reads its flags, runs the
checks and reports."""
