"""Sampling parameters, their batched form, penalties, logits processors, the sampler and stop conditions."""
