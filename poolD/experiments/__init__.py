"""Experiments of the seed papers, run on the overlay simulator (`poold simulate ...`)."""
