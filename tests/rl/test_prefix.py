"""Shared-prompt sampling: the right distribution, nucleus, min tokens, padding after EOS."""

import torch

from utu.rl.prefix import nucleus, sample_groups
from utu.rl.toy import char_tokenizer, tiny_llama


def encode(tokenizer, texts):
    chats = [[{"role": "user", "content": t}] for t in texts]
    prompts = [tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in chats]
    enc = tokenizer(prompts, return_tensors="pt", padding=True)
    return enc["input_ids"], enc["attention_mask"]


def test_nucleus_keeps_the_smallest_set_reaching_top_p():
    logits = torch.log(torch.tensor([[0.05, 0.5, 0.15, 0.3]]))
    kept = lambda p: torch.isfinite(nucleus(logits, p))[0].tolist()  # noqa: E731
    assert kept(0.7) == [False, True, False, True]
    assert kept(0.5) == [False, True, False, False]
    assert kept(0.99) == [True, True, True, True] and kept(1.0) == [True, True, True, True]


def test_first_tokens_follow_the_tempered_softmax():
    tokenizer = char_tokenizer()
    model = tiny_llama(len(tokenizer), hidden=16).eval()
    ids, mask = encode(tokenizer, ["ab"])
    torch.manual_seed(0)
    tokens = sample_groups(model, ids, mask, 4000, 1, eos_id=0, pad_id=0, temperature=0.5)[:, 0]
    with torch.no_grad():
        expected = torch.softmax(model(input_ids=ids, attention_mask=mask).logits[0, -1] / 0.5, dim=-1)
    observed = torch.bincount(tokens, minlength=len(expected)).float() / len(tokens)
    assert 0.5 * (observed - expected).abs().sum() < 0.05  # total variation distance


def test_min_tokens_and_padding_after_eos():
    tokenizer = char_tokenizer()
    model = tiny_llama(len(tokenizer), hidden=16).eval()
    with torch.no_grad():
        model.lm_head.weight[0] += 3.0  # make EOS likely, so both rules are really exercised
    ids, mask = encode(tokenizer, ["ab", "h0 12 =?"])
    torch.manual_seed(0)
    out = sample_groups(model, ids, mask, 8, 12, eos_id=0, pad_id=0, min_new_tokens=3)
    assert out.shape[0] == 16
    assert (out[:, :3] != 0).all()
    ended = (out == 0).any(dim=1)
    assert ended.any()
    for row in out[ended]:
        first = int((row == 0).nonzero()[0])
        assert (row[first:] == 0).all()


def test_the_growing_cache_samples_exactly_what_concatenation_does(monkeypatch):
    from transformers.cache_utils import DynamicLayer

    from utu.rl import prefix

    tokenizer = char_tokenizer()
    model = tiny_llama(len(tokenizer), hidden=16).eval()
    ids, mask = encode(tokenizer, ["ab", "h0 12 =?"])  # unequal lengths: left padding in the cache
    runs = []
    for layer in (prefix.GrowingLayer, DynamicLayer):
        monkeypatch.setattr(prefix, "GrowingLayer", layer)
        torch.manual_seed(3)
        runs.append(sample_groups(model, ids, mask, 4, 40, eos_id=0, pad_id=0, min_new_tokens=40))
    assert runs[0].shape == (8, 40)  # 40 tokens: the buffer doubles several times
    assert torch.equal(runs[0], runs[1])
