"""The G completions of a prompt share the prompt, so the model computes it once per group, not G times.

- `sample_groups`: the prompt's KV cache is repeated G times before decoding (HF `generate` with repeated
  inputs runs the prompt G times). Plain decode loop: temperature, optional nucleus, multinomial; equivalent in
  distribution to `generate(do_sample=True, temperature=T, top_p=p, top_k=0, min_new_tokens=m)`.
- `completion_logits`: the training forward. Each distinct prompt goes through once, its keys/values are
  indexed out to its rows (indexing is differentiable, so gradients from every completion flow back into the
  one prompt pass), then the completions run on top. Same numbers as one forward over [prompt; completion],
  at a fraction of the cost when prompts are long.
"""

import torch
from torch import Tensor
from transformers import DynamicCache
from transformers.cache_utils import Cache, CacheLayerMixin, DynamicLayer


class GrowingLayer(DynamicLayer):
    """A KV cache layer that writes each decoded token into spare room, doubling it when full, instead of
    concatenating: decoding T tokens copies the cache O(log T) times, not T times (HF's DynamicLayer)."""

    def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs) -> tuple[Tensor, Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        assert self.keys is not None and self.values is not None  # lazy_initialization sets them
        if self.keys.dim() != 4:  # nothing cached yet
            self.keys, self.values = key_states[..., :0, :], value_states[..., :0, :]
        length, extra = self.keys.shape[-2], key_states.shape[-2]
        # A new cache, one that repeat_interleave / select replaced, or a full buffer: copy into a larger one.
        if getattr(self, "_view", None) is not self.keys or length + extra > self._k.shape[-2]:
            self._adopt(self.keys, self.values, room=max(length, extra, 16))
        self._k[..., length : length + extra, :] = key_states
        self._v[..., length : length + extra, :] = value_states
        self._expose(length + extra)
        return self.keys, self.values

    def _adopt(self, keys: Tensor, values: Tensor, room: int) -> None:
        """Copy the cached keys/values into a fresh buffer with `room` free positions after them."""
        length = keys.shape[-2]
        self._k = keys.new_empty((*keys.shape[:-2], length + room, keys.shape[-1]))
        self._v = values.new_empty((*values.shape[:-2], length + room, values.shape[-1]))
        self._k[..., :length, :] = keys
        self._v[..., :length, :] = values
        self._expose(length)

    def _expose(self, length: int) -> None:
        self.keys, self.values = self._k[..., :length, :], self._v[..., :length, :]
        self._view = self.keys


def nucleus(logits: Tensor, top_p: float) -> Tensor:
    """Keep the smallest set of tokens whose probability reaches top_p (always at least the top token)."""
    if top_p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
    cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
    drop = cumulative - torch.softmax(sorted_logits, dim=-1) >= top_p  # mass before this token already enough
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, order, sorted_logits)


def prefill_groups(
    model, prompt_ids: Tensor, prompt_mask: Tensor, group_size: int
) -> tuple[Cache, Tensor, Tensor, Tensor]:
    """Each prompt computed once and its cache repeated G times, group-major: the cache, each row's next-token
    logits (B * G, vocab), attention mask (B * G, P) and last real position (B * G,)."""
    positions = (prompt_mask.cumsum(dim=1) - 1).clamp(min=0)
    cache = Cache(layer_class_to_replicate=GrowingLayer)
    out = model(
        input_ids=prompt_ids,
        attention_mask=prompt_mask,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    cache.batch_repeat_interleave(group_size)
    logits = out.logits[:, -1].repeat_interleave(group_size, dim=0)
    attention = prompt_mask.repeat_interleave(group_size, dim=0)
    return cache, logits, attention, positions[:, -1].repeat_interleave(group_size)


@torch.no_grad()
def sample_groups(
    model,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    group_size: int,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    min_new_tokens: int = 0,
) -> Tensor:
    """prompt_ids (B, P) left-padded -> completion ids (B * G, C), group-major, pad after the first EOS."""
    cache, logits, attention, position = prefill_groups(model, prompt_ids, prompt_mask, group_size)
    position = position[:, None]
    done = torch.zeros(logits.size(0), dtype=torch.bool, device=logits.device)
    tokens = []
    for t in range(max_new_tokens):
        scores = logits.float() / temperature
        if t < min_new_tokens:
            scores[:, eos_id] = float("-inf")
        probs = torch.softmax(nucleus(scores, top_p), dim=-1)
        token = torch.multinomial(probs, 1).squeeze(1)
        token = torch.where(done, torch.full_like(token, pad_id), token)
        tokens.append(token)
        done |= token == eos_id
        if done.all() or t == max_new_tokens - 1:
            break
        attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=1)
        position = position + 1
        out = model(
            input_ids=token[:, None],
            attention_mask=attention,
            position_ids=position,
            past_key_values=cache,
            use_cache=True,
        )
        logits = out.logits[:, -1]
    return torch.stack(tokens, dim=1)


def completion_logits(
    model, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor, completion_mask: Tensor, group: Tensor
) -> Tensor:
    """Logits predicting each completion token: (rows, C, vocab). `group[i]` names row i's prompt; rows of the
    same group must have identical (left-padded) prompts."""
    groups, inverse = torch.unique(group, return_inverse=True)
    first_row = torch.zeros_like(groups).scatter_(0, inverse, torch.arange(len(group), device=group.device))
    ids, mask = prompt_ids[first_row], prompt_mask[first_row]  # one row per distinct prompt
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    cache = DynamicCache()
    head = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    ).logits
    first = head[:, -1][inverse].unsqueeze(1)  # the prompt's last position predicts completion token 0
    if completion_ids.size(1) == 1:
        return first
    for layer in cache.layers:  # index_select: its backward is index_add, much faster on CPU than indexing's
        # an attention layer's keys and values, filled by the prompt pass (transformers types it wider)
        assert isinstance(layer, CacheLayerMixin) and layer.keys is not None and layer.values is not None
        layer.keys, layer.values = layer.keys.index_select(0, inverse), layer.values.index_select(0, inverse)
    attention = torch.cat([mask[inverse], completion_mask.long()], dim=1)[:, :-1]
    steps = torch.arange(1, completion_ids.size(1), device=group.device)
    positions = positions[inverse, -1:] + steps
    rest = model(
        input_ids=completion_ids[:, :-1],
        attention_mask=attention,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
    ).logits
    return torch.cat([first, rest], dim=1)
