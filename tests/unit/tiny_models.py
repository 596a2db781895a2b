"""Seeded tiny random causal LMs built from configs (no weights downloaded) and a tiny tokenizer."""

from __future__ import annotations

import functools

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

import sequence_salience as ss

CORPUS = [
    "The capital of France is Paris. The capital of Italy is Rome.",
    "Alice has three apples and Bob has two apples; together they have five.",
    "Q: What is 2 + 3? A: 5. Q: What is 7 - 4? A: 3.",
    "Sentences end with periods. Paragraphs are separated by blank lines.\n\nNew paragraph here.",
    "café naïve résumé 東京 😀 emoji",
]


@functools.lru_cache(maxsize=None)
def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained in memory on CORPUS (vocab 300) with BOS/EOS/pad."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<pad>", "<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS, trainer)
    from tokenizers.processors import TemplateProcessing

    tok.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def tiny_llama(seed: int = 0, layers: int = 2) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tiny_tokenizer()), hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0,
        bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg)


def tiny_gpt2(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = GPT2Config(
        vocab_size=len(tiny_tokenizer()), n_embd=32, n_layer=2, n_head=4, n_positions=128,
        bos_token_id=1, eos_token_id=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )
    return GPT2LMHeadModel(cfg)


def wrap(model: torch.nn.Module, name: str) -> ss.LanguageModel:
    model = model.double()  # float64 makes tight comparisons against the reference meaningful
    return ss.from_modules(model, tiny_tokenizer(), name=name)


MODEL_BUILDERS = {"llama": tiny_llama, "gpt2": tiny_gpt2}


def save_tiny_llama(path) -> str:
    """Saves tiny_llama() and tiny_tokenizer() as a local HF folder that load_model(path) loads."""
    tiny_llama().save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return str(path)


def save_tiny_llama_for(tokenizer, path, seed: int = 1) -> str:
    """A tiny random Llama over `tokenizer`'s vocabulary (e.g. the default model's), saved with that
    tokenizer as a local HF folder that load_model(path) and the server's --models load.

    Its weights are random: it formats prompts as the tokenizer's chat template does, generates and
    explains (nonsense), which is what the multi-model server tests need.
    """
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False,
    )
    LlamaForCausalLM(cfg).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)
