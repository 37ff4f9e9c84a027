"""Training-Free GRPO practice: rollouts, verification, the experience updater and the library."""
