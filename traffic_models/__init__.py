"""Synthetic Gnutella traffic: message mixes and sample streams."""
