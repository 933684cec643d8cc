"""NATS plumbing: subjects, connections, request/reply with error frames, JetStream events, tracing."""
