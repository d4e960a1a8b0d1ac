#!/usr/bin/env python3
"""Checks the include graph of src/: no upward arrow between folders, no
include cycle between files, and the narrower rules of the model and experts
folders.

Folders are ranked along the data path; a file may include headers of its own
folder or of folders ranked before it. Prints every violation and exits 1 if
there is any (scripts/test.sh runs it first).
"""
import os
import re
import sys

LAYERS = ["util", "format", "kernels", "compute", "io", "experts", "store", "model", "runtime", "text", "engine", "bench", "chat", "server", "cluster", "cli"]
RANK = {name: i for i, name in enumerate(LAYERS)}

# model/ is math over the compute seam: nothing from storage or I/O, and of the
# CPU kernels only the weight-format views (the CPU backend calls the kernels).
# The router's top-k choice is host logic on host data (the logits come to the
# host first), so it may use the scalar helpers of kernels/ops.h.
MODEL_FORBIDDEN = re.compile(r"^(store|experts|io)/")
MODEL_KERNELS_ALLOWED = {"kernels/qmatrix.h"}
MODEL_KERNELS_EXCEPTIONS = {("model/router.cpp", "kernels/ops.h")}
CHECK_SEAM = True

# experts/ is every tier of routed-expert storage (VRAM, RAM, local drives, the
# remote repository). It implements the expert interface that compute/ keeps
# (compute/expert_source.h, which backend.h needs) and places experts through
# the backends; it computes nothing, so of compute/ it sees only those, and no
# kernels. Reading bytes stays in io/ (read queue, HTTP client, probes).
EXPERTS_COMPUTE_ALLOWED = {"compute/expert_source.h", "compute/backend.h", "compute/cuda/cuda_backend.h"}

# Libraries whose headers are included with quotes by their own convention
# (Highway's foreach_target re-includes the including file by its quoted name).
EXTERNAL = ("hwy/",)

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder_of(rel):
    top = rel.split("/", 1)[0]
    return top if top in RANK else None


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    root = os.path.normpath(root)
    files = {}
    for d, _, names in os.walk(root):
        for n in names:
            if n.endswith((".h", ".cpp")):
                rel = os.path.relpath(os.path.join(d, n), root)
                with open(os.path.join(d, n), encoding="utf-8") as f:
                    files[rel] = INCLUDE.findall(f.read())
    errors = []
    for rel, incs in sorted(files.items()):
        src = folder_of(rel)
        if src is None:
            errors.append(f"{rel}: folder is not in the layer list of scripts/check_layers.py")
            continue
        for inc in incs:
            if inc.startswith(EXTERNAL):
                continue
            dst = folder_of(inc)
            if dst is None:
                errors.append(f"{rel}: includes \"{inc}\", which is in no known folder")
                continue
            if RANK[dst] > RANK[src]:
                errors.append(f"{rel}: includes \"{inc}\" ({src} -> {dst} points up: {' < '.join(LAYERS)})")
            if src == "model":
                if MODEL_FORBIDDEN.match(inc):
                    errors.append(f"{rel}: model/ includes \"{inc}\" (model is math: no storage or I/O)")
                if (CHECK_SEAM and dst == "kernels" and inc not in MODEL_KERNELS_ALLOWED
                        and (rel, inc) not in MODEL_KERNELS_EXCEPTIONS):
                    errors.append(f"{rel}: model/ includes \"{inc}\" (blocks compute through compute/backend.h)")
            if src == "experts" and (dst == "kernels" or (dst == "compute" and inc not in EXPERTS_COMPUTE_ALLOWED)):
                errors.append(f"{rel}: experts/ includes \"{inc}\" (the tiers see compute only through "
                              f"{', '.join(sorted(EXPERTS_COMPUTE_ALLOWED))})")
    # File-level cycles among headers.
    graph = {rel: [i for i in incs if i in files] for rel, incs in files.items() if rel.endswith(".h")}
    state = {}

    def visit(node, stack):
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                errors.append("include cycle: " + " -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    for e in errors:
        print(e)
    print(f"check_layers: {len(files)} files, {sum(len(v) for v in files.values())} includes, {len(errors)} problem(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
