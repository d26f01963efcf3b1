#!/usr/bin/env python3
"""Converts a SentencePiece Unigram .model to a tokenizer.json, shaped as the
Hugging Face converters shape a T5- or XLM-R-style SentencePiece tokenizer:

  normalizer      Sequence[Precompiled(the model's charsmap), Replace(/ {2,}/ -> " ")]
                  (Replace alone when the model has no charsmap, as with identity rules)
  pre_tokenizer   Metaspace("▁", prepend_scheme "always", split true)
  model           Unigram(vocab [[piece, score], ...], unk_id, byte_fallback)
  added_tokens    the control and unknown pieces, special and not normalized
  post_processor  TemplateProcessing appending "</s>" to each sequence (as T5's does)
  decoder         Metaspace; with byte fallback, Replace("▁" -> " "), ByteFallback, Fuse and
                  Strip(one leading space), as for Llama-style models

  spm-convert.py in.model out.tokenizer.json

The .model protobuf is read by the small reader below (the few fields the
conversion needs) and, when the sentencepiece package is importable, also
through its sentencepiece_model_pb2; the two must agree. The output is
deterministic.
"""
import base64
import json
import struct
import sys

# SentencePiece piece types (sentencepiece_model.proto).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
UNIGRAM = 1


def _varint(b, i):
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if c < 0x80:
            return v, i
        shift += 7


def _fields(b):
    """Yields (field number, wire type, value) of one protobuf message."""
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wt} not supported")
        yield num, wt, v


def read_model_minimal(data):
    """The fields the conversion reads, as a dict, from the raw protobuf."""
    m = {"pieces": [], "model_type": UNIGRAM, "unk_id": 0, "byte_fallback": False, "charsmap": b""}
    for num, _, v in _fields(data):
        if num == 1:  # ModelProto.pieces
            p = {"piece": "", "score": 0.0, "type": NORMAL}
            for n2, _, v2 in _fields(v):
                if n2 == 1:
                    p["piece"] = bytes(v2).decode("utf-8")
                elif n2 == 2:
                    p["score"] = struct.unpack("<f", v2)[0]
                elif n2 == 3:
                    p["type"] = v2
            m["pieces"].append(p)
        elif num == 2:  # ModelProto.trainer_spec
            for n2, _, v2 in _fields(v):
                if n2 == 3:
                    m["model_type"] = v2
                elif n2 == 35:
                    m["byte_fallback"] = bool(v2)
                elif n2 == 40:
                    m["unk_id"] = v2
        elif num == 3:  # ModelProto.normalizer_spec
            for n2, _, v2 in _fields(v):
                if n2 == 2:
                    m["charsmap"] = bytes(v2)
    return m


def read_model(data):
    try:
        from sentencepiece import sentencepiece_model_pb2 as pb
    except ImportError:
        return read_model_minimal(data)
    proto = pb.ModelProto()
    proto.ParseFromString(data)
    return {
        "pieces": [{"piece": p.piece, "score": p.score, "type": p.type} for p in proto.pieces],
        "model_type": proto.trainer_spec.model_type,
        "unk_id": proto.trainer_spec.unk_id,
        "byte_fallback": proto.trainer_spec.byte_fallback,
        "charsmap": proto.normalizer_spec.precompiled_charsmap,
    }


def convert(m):
    if m["model_type"] != UNIGRAM:
        raise ValueError(f"model type {m['model_type']} is not Unigram")
    pieces = m["pieces"]
    if not any(p["piece"] == "</s>" for p in pieces):
        raise ValueError("the model has no </s> piece for the post-processor")
    charsmap = m["charsmap"]
    replace = {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}
    if charsmap:
        normalizer = {"type": "Sequence", "normalizers": [
            {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode("ascii")},
            replace]}
    else:
        normalizer = {"type": "Sequence", "normalizers": [replace]}
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    added = [{"id": i, "content": p["piece"], "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True}
             for i, p in enumerate(pieces) if p["type"] in (CONTROL, UNKNOWN)]
    eos = next(i for i, p in enumerate(pieces) if p["piece"] == "</s>")
    seq = lambda s: {"Sequence": {"id": s, "type_id": 0}}
    eos_tok = {"SpecialToken": {"id": "</s>", "type_id": 0}}
    post = {"type": "TemplateProcessing",
            "single": [seq("A"), eos_tok],
            "pair": [seq("A"), eos_tok, seq("B"), eos_tok],
            "special_tokens": {"</s>": {"id": "</s>", "ids": [eos], "tokens": ["</s>"]}}}
    if m["byte_fallback"]:
        decoder = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    else:
        decoder = metaspace
    # Scores are float32 in the .model; each is written as its exact value
    # in double precision (the shortest decimal that reads back as it).
    vocab = [[p["piece"], float(p["score"])] for p in pieces]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": normalizer, "pre_tokenizer": metaspace, "post_processor": post, "decoder": decoder,
        "model": {"type": "Unigram", "unk_id": m["unk_id"], "vocab": vocab, "byte_fallback": m["byte_fallback"]},
    }


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: spm-convert.py in.model out.tokenizer.json")
    with open(sys.argv[1], "rb") as f:
        data = f.read()
    m = read_model(data)
    # With the package present, both readers run and must agree: a mismatch
    # means the small reader is wrong.
    mm = read_model_minimal(data)
    for k in m:
        if m[k] != mm[k]:
            sys.exit(f"spm-convert: the protobuf readers disagree on {k}")
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(convert(m), f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
