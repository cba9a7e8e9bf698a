"""Helpers shared by the tests: peers, daemons, processes, recorded vectors."""
