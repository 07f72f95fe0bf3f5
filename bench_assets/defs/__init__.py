"""Dagster objects only: every module here is loaded by ``bench_assets.definitions``."""
