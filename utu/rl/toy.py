"""A tiny world for tests and benchmarks: a character tokenizer, a randomly initialised 2-layer Llama and a
verify function, all built in memory in milliseconds, so GRPO's behaviour can be checked on the CPU.

Its pad token equals its EOS token, as in SmolLM2 and many chat models, which is the case masks get wrong.
"""

from typing import Any

ALPHABET = "abcdefgh0123456789 +=?>\n"
EOS = "<eos>"


def char_tokenizer() -> Any:
    """One token per character of ALPHABET, plus <eos> (also the pad token) and <unk>."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate([EOS, "<unk>", *ALPHABET])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=EOS, pad_token=EOS, unk_token="<unk>")
    tokenizer.chat_template = (
        "{% for m in messages %}{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}>{% endif %}"
    )
    return tokenizer


def tiny_llama(vocab_size: int, seed: int = 0, hidden: int = 32, layers: int = 2) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    return LlamaForCausalLM(config)


def reward(text: str, target: str) -> float:
    """The share of the completion's characters that equal the answer (a single character)."""
    return text.count(target) / len(text) if text and target else 0.0


async def verify_func(sample: Any, timeout_score: float = 0, **kwargs: Any) -> dict[str, Any]:
    """`reward` as a verify function. Async because it cannot hang: a sync verifier runs in a thread of its own
    (so a hung call cannot block the loop), which costs more than this arithmetic."""
    return {"reward": reward(sample.response or "", sample.correct_answer or ""), "reasoning": None}
