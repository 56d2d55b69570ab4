"""Memory planning: simulate training steps on fake tensors, measure real ones."""
