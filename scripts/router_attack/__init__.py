"""The parts of ``scripts/attack_router.py``: its settings and figures, the router under
attack and its admin interface, the honest peers, the harness that runs one scenario,
the attacks themselves and the report. The script reads its flags and runs them."""
