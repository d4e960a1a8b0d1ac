"""Corpus: KJV chapters from data/kjv_chapters.jsonl.gz (see prepare_corpus.py), deterministic split.

A chapter is one document: its verses joined by '\n'. Held-out = every chapter whose canonical index
(0..1188, Genesis 1 = 0) is = 10 mod 20 (60 chapters, ~5%); train = the rest.
Chat documents (ChatML, for the chat template) are derived from train chapters only: for every 3rd train
chapter, user = one verse, assistant = the next two verses.
"""
import gzip, hashlib, json, os

HERE = os.path.dirname(os.path.abspath(__file__))
PATH = os.path.join(HERE, "data", "kjv_chapters.jsonl.gz")
SHA256 = "977dbcd2f209c771c78ac72447f3fb9129e2986009591073d185d13b5320e449"


def load_corpus():
    raw = gzip.open(PATH, "rb").read()
    assert hashlib.sha256(raw).hexdigest() == SHA256, "corpus checksum mismatch"
    chapters = [json.loads(l) for l in raw.decode().splitlines()]
    train, held = [], []
    for i, c in enumerate(chapters):
        (held if i % 20 == 10 else train).append(c)
    chat = []
    for j, c in enumerate(train):
        v = c["verses"]
        if j % 3 == 0 and len(v) >= 4:
            k = (j * 7) % (len(v) - 2)
            chat.append("<|im_start|>user\n" + v[k] + "<|im_end|>\n<|im_start|>assistant\n"
                        + v[k + 1] + "\n" + v[k + 2] + "<|im_end|>\n")
    return {
        "train_text": ["\n".join(c["verses"]) for c in train],
        "heldout_text": ["\n".join(c["verses"]) for c in held],
        "heldout_names": [f"{c['book']} {c['chapter']}" for c in held],
        "chat_text": chat,
    }
