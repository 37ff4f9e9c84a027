"""Evaluate an agent: K attempts per question, judged by the configured verify function, with honest metrics.

    python scripts/run_eval.py --config_name math/math_AIME24 [--exp_id X] [--pass_k 32] [--limit 10]
    python scripts/run_eval.py --config_name local/mawps --agent_config runs/p1/enhanced_agent.yaml --exp_id p1_eval
    python scripts/run_eval.py --compare BASELINE_EXP ENHANCED_EXP

Re-running the same exp_id runs only what is missing (resume after a crash or Ctrl-C); --fresh starts over.
Extra arguments are Hydra overrides, e.g. `agent.model.model_settings.temperature=0.6`.
"""

from utu.commands.eval import main

if __name__ == "__main__":
    main()
