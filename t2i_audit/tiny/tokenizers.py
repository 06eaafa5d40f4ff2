"""Tokenizers of the LLM text encoders' *kinds*, built offline in memory (no hub): byte-level BPE
(Qwen), SentencePiece-style BPE with byte fallback (Gemma). Vocabularies are trained here on the
CLIP vocabulary's words plus the pipelines' own templates, so templates tokenize to the same number
of tokens as with the real tokenizers where the pipelines depend on it."""

from __future__ import annotations

import inspect
import json

from . import clip_vocab_merges  # the package's CLIP BPE cut (tiny/__init__.py)


# the CLIP vocabulary's words plus the Qwen-Image chat template, so that the template's prefix is 34 tokens
# exactly as with the real tokenizer (QwenImagePipeline drops prompt_template_encode_start_idx = 34 rows).
QWEN_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                 "<|image_pad|>", "<|video_pad|>")
_QWEN_PRETOKENIZE = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                     r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")


def qwen_tokenizer():
    """transformers' Qwen2Tokenizer (byte-level BPE) with a vocabulary trained here, in memory."""
    from transformers import Qwen2Tokenizer

    vocab, merges = _byte_level_bpe(QWEN_SPECIALS, [_QWEN_TEMPLATE.format("a photo")] * 50)
    tok = Qwen2Tokenizer(vocab=vocab, merges=merges, model_max_length=32768)
    tok.add_special_tokens({"additional_special_tokens": list(QWEN_SPECIALS[1:])})
    return tok


# pipeline_qwenimage.py QwenImagePipeline.__init__: prompt_template_encode (tests pin it to the pipeline's own)
_QWEN_TEMPLATE = ("<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, "
                  "text, spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}"
                  "<|im_end|>\n<|im_start|>assistant\n")


GEMMA_SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>")


def gemma_tokenizer():
    """transformers' GemmaTokenizer (SentencePiece-style BPE: spaces as "▁", byte fallback) with merges trained
    here on the CLIP vocabulary's words and Sana's complex human instruction (split at word starts while
    training, so no merge crosses a word: slot offsets stay word-aligned)."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, trainers
    from tokenizers.models import BPE
    from transformers import GemmaTokenizer

    from diffusers import SanaPipeline

    instruction = inspect.signature(SanaPipeline.__call__).parameters["complex_human_instruction"].default
    corpus = _word_corpus() + ["\n".join(instruction)] * 20
    bpe = Tokenizer(BPE(byte_fallback=True, unk_token="<unk>"))
    bpe.normalizer = normalizers.Replace(" ", "\u2581")
    bpe.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never")
    bytes_ = [f"<0x{i:02X}>" for i in range(256)]
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=3000, special_tokens=list(GEMMA_SPECIALS) + bytes_, show_progress=False))
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    # add_bos_token: Gemma's tokenizer starts every sequence with <bos> (Sana keeps that row: select_index [0])
    return GemmaTokenizer(vocab=model["vocab"], merges=merges, model_max_length=8192, add_bos_token=True)


def _word_corpus() -> list[str]:
    """Lines of 20 words: the CLIP vocabulary's alphabetic ASCII words (every tiny tokenizer's base corpus)."""
    vocab, _ = clip_vocab_merges()
    words = [t[:-4] for t in vocab if t.endswith("</w>") and t[:-4].isalpha() and t.isascii()]
    return [" ".join(words[i:i + 20]) for i in range(0, len(words), 20)]


def _byte_level_bpe(specials, extra_corpus=()):
    """A byte-level BPE (Qwen's pre-tokenizer regex) trained on the CLIP vocabulary's words and ``extra_corpus``:
    ``(vocab, merges)``."""
    from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers, trainers
    from tokenizers.models import BPE

    corpus = _word_corpus() + list(extra_corpus)
    bpe = Tokenizer(BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_QWEN_PRETOKENIZE), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=3000, special_tokens=list(specials), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    model = json.loads(bpe.to_str())["model"]
    return model["vocab"], [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]


# GLM-4's specials (THUDM/glm-4-9b-chat-hf tokenizer.json added_tokens; CogView4-6B/tokenizer is that tokenizer):
# every sequence starts with "[gMASK]<sop>", "<|endoftext|>" pads, and padding is on the LEFT
GLM_SPECIALS = ("<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
                "<|assistant|>", "<|observation|>")


def glm_tokenizer():
    """A GLM-4-kind tokenizer (byte-level BPE, "[gMASK]<sop>" prefix, left padding), in memory."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    vocab, merges = _byte_level_bpe(GLM_SPECIALS)
    bpe = Tokenizer(BPE(vocab=vocab, merges=merges))
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(__import__("tokenizers").Regex(_QWEN_PRETOKENIZE), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    bpe.decoder = decoders.ByteLevel()
    bpe.add_special_tokens(list(GLM_SPECIALS))
    bpe.post_processor = processors.TemplateProcessing(
        single="[gMASK] <sop> $A", pair="[gMASK] <sop> $A $B",
        special_tokens=[(t, vocab[t]) for t in ("[gMASK]", "<sop>")])
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   padding_side="left", model_max_length=128000)


# ---------------------------------------------------------------- FLUX.2 [dev]: Mistral 3 (Mistral Small 3.1)

# Mistral Small 3.1's (Tekken) specials at their real ids: <unk>=0 <s>=1 </s>=2 [INST]=3 [/INST]=4 ... [IMG]=10
# <pad>=11 [IMG_BREAK]=12 [IMG_END]=13 ... [SYSTEM_PROMPT]=17 [/SYSTEM_PROMPT]=18
MISTRAL_SPECIALS = ("<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]",
                    "[IMG_END]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]")
# Mistral-Small-3.1-24B-Instruct-2503's chat template, reduced to the system + user text path that
# pipeline_flux2.py format_input builds (content as a list of {"type": "text"} blocks; the default system
# message with strftime_now is left out: FLUX.2 always passes its own)
_MISTRAL3_CHAT_TEMPLATE = (
    "{{- bos_token }}{%- if messages[0]['role'] == 'system' %}"
    "{%- if messages[0]['content'] is string %}{%- set system_message = messages[0]['content'] %}"
    "{%- else %}{%- set system_message = messages[0]['content'][0]['text'] %}{%- endif %}"
    "{%- set loop_messages = messages[1:] %}{%- else %}{%- set system_message = '' %}"
    "{%- set loop_messages = messages %}{%- endif %}"
    "{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}"
    "{%- for message in loop_messages %}{%- if message['role'] == 'user' %}"
    "{%- if message['content'] is string %}{{- '[INST]' + message['content'] + '[/INST]' }}"
    "{%- else %}{{- '[INST]' }}{%- for block in message['content'] %}"
    "{%- if block['type'] == 'text' %}{{- block['text'] }}{%- else %}{{- '[IMG]' }}{%- endif %}{%- endfor %}"
    "{{- '[/INST]' }}{%- endif %}{%- elif message['role'] == 'assistant' %}{{- message['content'] + eos_token }}"
    "{%- endif %}{%- endfor %}")


def mistral3_processor():
    """Mistral Small 3.1's processor kind (PixtralProcessor: Pixtral image processor + a byte-level BPE tokenizer
    that starts sequences with <s>, + the chat template), built in memory. Flux2Pipeline calls
    ``tokenizer.apply_chat_template(..., tokenize=True, padding="max_length")`` on it."""
    from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers, processors, trainers
    from tokenizers.models import BPE
    from transformers import PixtralImageProcessor, PixtralProcessor, PreTrainedTokenizerFast

    from diffusers.pipelines.flux2.system_messages import SYSTEM_MESSAGE

    corpus = _word_corpus() + [SYSTEM_MESSAGE] * 20
    bpe = Tokenizer(BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_QWEN_PRETOKENIZE), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=3000, special_tokens=list(MISTRAL_SPECIALS), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bpe.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B",
                                                       special_tokens=[("<s>", 1)])
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                  pad_token="<pad>", model_max_length=131072,
                                  additional_special_tokens=list(MISTRAL_SPECIALS[3:11] + MISTRAL_SPECIALS[12:]))
    return PixtralProcessor(image_processor=PixtralImageProcessor(), tokenizer=tok, patch_size=16,
                            spatial_merge_size=2, chat_template=_MISTRAL3_CHAT_TEMPLATE)


# Llama 3 (tokenizer.json of meta-llama/Meta-Llama-3.1-8B-Instruct): byte-level BPE, digits in runs of 1-3,
# <|begin_of_text|> prepended by a TemplateProcessing post-processor, eos_token <|eot_id|> (the Instruct model's)
LLAMA3_SPECIALS = ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
_LLAMA3_PRETOKENIZE = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                       r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")


def llama3_tokenizer():
    """transformers' PreTrainedTokenizerFast over a Llama-3-style byte-level BPE trained here, in memory
    (HiDreamImagePipeline's tokenizer_4 is a PreTrainedTokenizerFast; the pipeline sets pad = eos itself)."""
    from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers, processors, trainers
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    corpus = _word_corpus()
    bpe = Tokenizer(BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_LLAMA3_PRETOKENIZE), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=3000, special_tokens=list(LLAMA3_SPECIALS), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bos = LLAMA3_SPECIALS[0]
    bpe.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                      special_tokens=[(bos, bpe.token_to_id(bos))])])
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=bos, eos_token="<|eot_id|>",
                                   model_max_length=131072)


# Qwen3's chat template (Qwen/Qwen3-4B tokenizer_config.json chat_template), reduced to what a text-to-image
# pipeline renders: system / user / assistant turns and the generation prompt, whose empty think block appears only
# with enable_thinking=False (ZImagePipeline._encode_prompt passes enable_thinking=True: no think block)
QWEN3_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}")


def qwen3_tokenizer():
    """Qwen3's kind: Qwen 2's byte-level BPE (the same Qwen2Tokenizer class) with Qwen3's chat template."""
    tok = qwen_tokenizer()
    tok.chat_template = QWEN3_CHAT_TEMPLATE
    return tok


# pipeline_kandinsky_t2i.py Kandinsky5T2IPipeline.__init__: prompt_template (tests pin it to the pipeline's own);
# prompt_template_encode_start_idx = 40 = its system prefix in Qwen2.5-VL's tokenizer
_KANDINSKY5_TEMPLATE = ("<|im_start|>system\nYou are a prompt engineer. Describe the image by detailing the color, "
                        "shape, size, texture, quantity, text, spatial relationships of the objects and background:"
                        "<|im_end|>\n<|im_start|>user\n{}<|im_end|>")


def kandinsky5_qwen_tokenizer():
    """Qwen2Tokenizer (Qwen's kind, as qwen_tokenizer) trained with Kandinsky 5's template as well, so that its
    system prefix is 40 tokens as with the real tokenizer (the pipeline drops exactly 40 rows)."""
    from transformers import Qwen2Tokenizer

    vocab, merges = _byte_level_bpe(QWEN_SPECIALS, [_QWEN_TEMPLATE.format("a photo"),
                                                    _KANDINSKY5_TEMPLATE.format("a photo")] * 50)
    tok = Qwen2Tokenizer(vocab=vocab, merges=merges, model_max_length=32768)
    tok.add_special_tokens({"additional_special_tokens": list(QWEN_SPECIALS[1:])})
    return tok
