"""Memorization measures that compare generations with what a model was trained on."""
