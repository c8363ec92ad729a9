"""Callbacks that check the training run they are attached to (transformers, Lightning)."""
