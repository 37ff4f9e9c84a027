from utu.config.loader import compose_dict, config_root, load_agent_config, load_config
from utu.config.models import (
    AgentConfig,
    DataArguments,
    DataConfig,
    EvalConfig,
    ModelConfig,
    ModelProvider,
    ModelSettings,
    PracticeArguments,
    Pricing,
    ToolkitConfig,
    TrainingFreeGRPOConfig,
)

__all__ = [
    "AgentConfig",
    "DataArguments",
    "DataConfig",
    "EvalConfig",
    "ModelConfig",
    "ModelProvider",
    "ModelSettings",
    "PracticeArguments",
    "Pricing",
    "ToolkitConfig",
    "TrainingFreeGRPOConfig",
    "compose_dict",
    "config_root",
    "load_agent_config",
    "load_config",
]
