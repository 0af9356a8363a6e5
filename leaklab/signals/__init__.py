"""Signals computed once per evaluation and shared by every detector: token statistics (`logprobs`),
generation (`generation`) and cached continuations (`continuations`)."""
