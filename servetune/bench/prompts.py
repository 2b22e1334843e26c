"""Deterministic text prompts and request lengths for the builtin client.

No tokenizer is needed on the client host. A prompt is words drawn (from the workload seed
and the request index) from a list of short, common English words; with a leading space
each is one token in the Llama-3, Qwen2/3 and Mistral tokenizers. Before a run the client
measures the server tokenizer's tokens per word (two one-token requests, the difference of
their `usage.prompt_tokens`) and sizes prompts by it, so a prompt carries about the
requested number of text tokens on any tokenizer. The metrics use the server's own count
(`usage.prompt_tokens`, chat template and image tokens included).
"""

from __future__ import annotations

import random

_WORDS = (
    "the of and to in is was for on are with as his they be at one have this from or had by hot but some "
    "what there we can out other were all your when up use word how said an each she which do their time if "
    "will way about many then them would write like so these her long make thing see him two has look more day "
    "could go come did my sound no most number who over know water than call first people may down side been "
    "now find any new work part take get place made live where after back little only round man year came show "
    "every good me give our under name very through just form much great think say help low line before turn "
    "cause same mean differ move right boy old too does tell set three want air well also play small end put "
    "home read hand port large spell add even land here must big high such follow act why ask men change went "
    "light kind off need house picture try us again animal point mother world near build self earth father head "
    "stand own page should country found answer school grow study still learn plant cover food sun four thought "
    "let keep eye never last door between city tree cross since hard start might story saw far sea draw left "
    "late run while press close night real life few stop open seem together next white children begin got walk "
    "example ease paper often always music those both mark book letter until mile river car feet care second "
    "group carry took rain eat room friend began idea fish mountain north once base hear horse cut sure watch "
    "color face wood main enough plain girl usual young ready above ever red list though feel talk bird soon body"
).split()


def sample_lengths(full_len: int, range_ratio: float, count: int, rng: random.Random) -> list[int]:
    """Lengths drawn uniformly from `[max(1, int(full_len * range_ratio)), full_len]`, as SGLang's client."""
    low = max(int(full_len * range_ratio), 1)
    return [rng.randint(low, full_len) for _ in range(count)]


def make_prompt(seed: int, index: int, tokens: int) -> str:
    """About `tokens` tokens of text, the same for the same (seed, index)."""
    rng = random.Random(f"servetune-prompt:{seed}:{index}")
    return " ".join(rng.choices(_WORDS, k=max(tokens, 1)))
