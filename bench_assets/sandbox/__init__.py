"""The process gateway and every way out of it: ``process`` runs every subprocess,
``egress``/``egress_relay`` are an agent's only road to the model API,
``index_egress`` an environment build's only road to the package index, ``gitrepo`` the
harness's git commands, ``redact`` scrubs secrets from what comes back.

May import: kernel, config.
"""
