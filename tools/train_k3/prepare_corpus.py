#!/usr/bin/env python3
"""Extract the King James Version text from Debian's bible-kjv-text package (public domain text).

  python3 tools/train_k3/prepare_corpus.py [--workdir /tmp/kjv]

Steps (needs apt-get and dpkg-deb, i.e. a Debian/Ubuntu machine):
  apt-get download bible-kjv-text bible-kjv      # data (compressed BRS format) + the `bible` reader
  dpkg-deb -x each package
  bible -f -p <data dir> gen1:1-rev22:21         # one verse per line: "Ge1:1 In the beginning ..."
and writes tools/train_k3/data/kjv_chapters.jsonl.gz: one JSON object per chapter,
{"book": "Ge", "chapter": 1, "verses": ["In the beginning God ...", ...]}, in canonical order.
The sha256 of the uncompressed JSONL is checked against data/SHA256SUMS (Debian bookworm, bible-kjv 4.38).
Licence: see data/COPYRIGHT.bible-kjv-text (KJV text: copyright expired, 1611; BRS packaging: unrestricted use).
"""
import argparse, glob, gzip, hashlib, json, os, re, shutil, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", default="/tmp/kjv_extract")
    args = ap.parse_args()
    w = args.workdir
    os.makedirs(w, exist_ok=True)
    for pkg in ("bible-kjv-text", "bible-kjv"):
        if not glob.glob(os.path.join(w, pkg + "_*.deb")):
            subprocess.run(["apt-get", "download", pkg], cwd=w, check=True)
        deb = sorted(glob.glob(os.path.join(w, pkg + "_*.deb")))[-1]
        subprocess.run(["dpkg-deb", "-x", deb, os.path.join(w, "root")], check=True)
    root = os.path.join(w, "root")
    txt = subprocess.run([os.path.join(root, "usr/bin/bible"), "-f", "-p", os.path.join(root, "usr/lib"),
                          "gen1:1-rev22:21"], check=True, capture_output=True, text=True).stdout
    chapters = []
    pat = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$")
    for line in txt.splitlines():
        m = pat.match(line)
        assert m, line
        book, ch, vs, text = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4).strip()
        if not chapters or chapters[-1]["book"] != book or chapters[-1]["chapter"] != ch:
            chapters.append({"book": book, "chapter": ch, "verses": []})
        assert vs == len(chapters[-1]["verses"]) + 1, line
        chapters[-1]["verses"].append(text)
    raw = "".join(json.dumps(c, ensure_ascii=True) + "\n" for c in chapters).encode()
    digest = hashlib.sha256(raw).hexdigest()
    os.makedirs(DATA, exist_ok=True)
    with gzip.GzipFile(os.path.join(DATA, "kjv_chapters.jsonl.gz"), "wb", mtime=0) as f:
        f.write(raw)
    shutil.copy(os.path.join(root, "usr/share/doc/bible-kjv-text/copyright"), os.path.join(DATA, "COPYRIGHT.bible-kjv-text"))
    print(f"{len(chapters)} chapters, {sum(len(c['verses']) for c in chapters)} verses, {len(raw)} bytes, sha256 {digest}")
    sums = os.path.join(DATA, "SHA256SUMS")
    if os.path.exists(sums):
        want = open(sums).read().split()[0]
        if want != digest:
            print(f"sha256 MISMATCH: expected {want}", file=sys.stderr)
            return 1
        print("sha256 matches data/SHA256SUMS")
    else:
        open(sums, "w").write(f"{digest}  kjv_chapters.jsonl (uncompressed)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
