"""The live trio runtime around the pure core: actor, reactor, listener, registry,
store, event log, replay, and the ports it drives."""
