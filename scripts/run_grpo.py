"""Parameter-updating GRPO on a local model, rewarded by the same verify functions as practice and evaluation.

    python scripts/run_grpo.py                                   # SmolLM2-135M on MAWPS, on the CPU
    python scripts/run_grpo.py --config_name toy                 # a seconds-long smoke run on a tiny model
    python scripts/run_grpo.py --steps 40 trainer.lr=1e-5 trainer.beta=0.04

Writes runs/<exp_id>/grpo/: metrics.jsonl (one line per step), tensorboard/ (if installed), checkpoint/
(model or LoRA adapter, optimizer, scheduler, RNG, step) and test.json (Mean@k / Pass@k before and after).
Running the same command again resumes from the checkpoint; --fresh starts over.
Multi-GPU: `accelerate launch scripts/run_grpo.py ...` (Accelerate's config picks DDP, DeepSpeed or FSDP).
"""

from utu.commands.grpo import main

if __name__ == "__main__":
    main()
