"""Spindle on NATS JetStream (docs/scale-out.md): the server launcher, the trio bridge to
nats-py, the fenced per-thread log and the thread leases."""
