"""Agent adapters: one interface (:class:`~bench_assets.agents.base.Adapter`), three kinds."""
