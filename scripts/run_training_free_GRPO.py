"""Training-Free GRPO practice: learn an experience library for an agent, then export the enhanced agent.

    python scripts/run_training_free_GRPO.py --config_name math_reasoning
    python scripts/run_training_free_GRPO.py --config_name local_mawps --epochs 2 --restart_step 1

Flags override the YAML (same names as Youtu-Agent); extra `key=value` arguments are Hydra overrides.
"""

from utu.commands.practice import main

if __name__ == "__main__":
    main()
