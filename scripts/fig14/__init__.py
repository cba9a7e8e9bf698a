"""The parts of ``scripts/experiment_fig14.py``: one run of a configuration (and the
router helpers the other experiment scripts share), the bursty arrivals, the figures,
and the tables, the paper's floors and the written sections. The script reads its flags
and runs them."""
