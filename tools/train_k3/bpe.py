#!/usr/bin/env python3
"""Deterministic byte-level BPE (GPT-2 style) trained by our own code, saved as a standard HF tokenizer.json.

  python3 tools/train_k3/bpe.py train OUTDIR        # trains on the train split, writes tokenizer.json + tokenizer_config.json

Pre-tokenizer: Split(GPT-2 regex, Isolated) then ByteLevel(add_prefix_space=false, use_regex=false); model BPE with
vocab (256 byte symbols in byte order, then merges in rank order, then the special tokens) and merges; ByteLevel decoder.
Merge selection: highest pair count over the pre-token frequency table, ties broken by the smaller (left, right)
pair of byte-level strings, so training is deterministic. Encoding follows HF BPE: repeatedly merge the adjacent
pair of lowest rank.
"""
import heapq, json, os, sys
from collections import Counter, defaultdict

GPT2_PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
try:
    import regex as _re
    _PAT = _re.compile(GPT2_PAT)
    _ASCII_ONLY = False
except ImportError:                       # stdlib fallback, identical on ASCII text
    import re as _re
    _PAT = _re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")
    _ASCII_ONLY = True

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
VOCAB_SIZE = 4096
CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


B2U = bytes_to_unicode()
U2B = {v: k for k, v in B2U.items()}


def pretokenize(text):
    if _ASCII_ONLY:
        assert text.isascii(), "install the `regex` module for non-ASCII text"
    return [m.group(0) for m in _PAT.finditer(text)]


def to_symbols(piece):
    return "".join(B2U[b] for b in piece.encode("utf-8"))


def train(texts, vocab_size=VOCAB_SIZE):
    counts = Counter()
    for t in texts:
        counts.update(pretokenize(t))
    wf = Counter()
    for piece, c in counts.items():
        wf[to_symbols(piece)] += c
    keys = sorted(wf)
    words = [list(k) for k in keys]
    freqs = [wf[k] for k in keys]
    n_merges = vocab_size - 256 - len(SPECIALS)
    pc = defaultdict(int)
    where = defaultdict(set)
    for i, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pc[(a, b)] += freqs[i]
            where[(a, b)].add(i)
    heap = [(-c, p) for p, c in pc.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < n_merges and heap:
        negc, p = heapq.heappop(heap)
        if -negc <= 0 or pc.get(p, 0) != -negc:
            continue
        merges.append(p)
        new = p[0] + p[1]
        touched = set()
        for i in sorted(where.pop(p)):
            w, f = words[i], freqs[i]
            if len(w) < 2:
                continue
            for a, b in zip(w, w[1:]):
                pc[(a, b)] -= f
                touched.add((a, b))
            nw, j = [], 0
            while j < len(w):
                if j < len(w) - 1 and w[j] == p[0] and w[j + 1] == p[1]:
                    nw.append(new)
                    j += 2
                else:
                    nw.append(w[j])
                    j += 1
            words[i] = nw
            for a, b in zip(nw, nw[1:]):
                pc[(a, b)] += f
                where[(a, b)].add(i)
                touched.add((a, b))
        for q in sorted(touched):
            if pc[q] > 0:
                heapq.heappush(heap, (-pc[q], q))
            elif q in pc:
                del pc[q]
    assert len(merges) == n_merges, (len(merges), n_merges)
    return merges


def build_vocab(merges):
    vocab = {B2U[b]: b for b in range(256)}
    for a, b in merges:
        vocab[a + b] = len(vocab)
    assert len(vocab) == 256 + len(merges), "duplicate merge result"
    specials = {s: len(vocab) + i for i, s in enumerate(SPECIALS)}
    return vocab, specials


def tokenizer_json(merges):
    vocab, specials = build_vocab(merges)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for s, i in specials.items()],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": GPT2_PAT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {**vocab, **specials}, "merges": [f"{a} {b}" for a, b in merges]},
    }


def tokenizer_config():
    return {
        "add_bos_token": False, "add_eos_token": False, "add_prefix_space": False,
        "bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "pad_token": "<|pad|>", "unk_token": None,
        "model_max_length": 1048576, "clean_up_tokenization_spaces": False,
        "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {str(VOCAB_SIZE - len(SPECIALS) + i): {
            "content": s, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
            for i, s in enumerate(SPECIALS)},
    }


class Tokenizer:
    """Encoder/decoder for the tokenizer.json written above (same semantics as HF tokenizers' BPE)."""

    def __init__(self, path):
        tj = json.load(open(path))
        m = tj["model"]
        self.vocab = m["vocab"]
        self.inv = {i: s for s, i in self.vocab.items()}
        self.ranks = {tuple(x.split(" ")): r for r, x in enumerate(m["merges"])}
        self.special = {a["content"]: a["id"] for a in tj["added_tokens"]}
        self.cache = {}

    def _bpe(self, sym):
        if sym in self.cache:
            return self.cache[sym]
        w = list(sym)
        while len(w) > 1:
            best, bi = None, -1
            for i in range(len(w) - 1):
                r = self.ranks.get((w[i], w[i + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            w = w[:bi] + [w[bi] + w[bi + 1]] + w[bi + 2:]
        ids = [self.vocab[x] for x in w]
        self.cache[sym] = ids
        return ids

    def encode(self, text):
        """Special tokens in the text are recognised (as HF does for added tokens)."""
        out = []
        pos = 0
        while pos < len(text):
            nxt = [(text.find(s, pos), s) for s in self.special if text.find(s, pos) >= 0]
            if nxt:
                at, s = min(nxt)
            else:
                at, s = len(text), None
            for piece in pretokenize(text[pos:at]):
                out.extend(self._bpe(to_symbols(piece)))
            if s is None:
                break
            out.append(self.special[s])
            pos = at + len(s)
        return out

    def decode(self, ids):
        parts, buf = [], []
        for i in ids:
            s = self.inv[int(i)]
            if s in self.special:
                if buf:
                    parts.append(bytes(buf).decode("utf-8", "replace"))
                    buf = []
                parts.append(s)
            else:
                buf.extend(U2B[c] for c in s)
        if buf:
            parts.append(bytes(buf).decode("utf-8", "replace"))
        return "".join(parts)


def main(argv):
    if len(argv) >= 2 and argv[0] == "train":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from corpus import load_corpus
        c = load_corpus()
        merges = train([d for d in c["train_text"]])
        os.makedirs(argv[1], exist_ok=True)
        with open(os.path.join(argv[1], "tokenizer.json"), "w") as f:
            json.dump(tokenizer_json(merges), f, ensure_ascii=False, indent=1)
        with open(os.path.join(argv[1], "tokenizer_config.json"), "w") as f:
            json.dump(tokenizer_config(), f, indent=2)
        tok = Tokenizer(os.path.join(argv[1], "tokenizer.json"))
        n_tr = sum(len(tok.encode(t)) for t in c["train_text"])
        n_ho = sum(len(tok.encode(t)) for t in c["heldout_text"])
        b_ho = sum(len(t.encode()) for t in c["heldout_text"])
        print(f"{len(merges)} merges; train {n_tr} tokens, held-out {n_ho} tokens ({b_ho / n_ho:.2f} bytes/token)")
        print("last merges:", merges[-5:])
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
