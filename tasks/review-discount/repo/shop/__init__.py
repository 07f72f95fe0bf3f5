"""A tiny checkout: prices in whole cents."""
