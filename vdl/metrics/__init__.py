"""Measurements a node keeps about itself (a leaf: imports nothing from the project)."""
