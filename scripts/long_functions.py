#!/usr/bin/env python3
"""Lists the functions in src/ longer than a limit (default 80 lines), longest first,
for issue 32's goal of fewer long functions: python3 scripts/long_functions.py [LIMIT].

A function's length runs from the first line of its signature to its closing
brace, both included. A function is found where a line at column 0 (or at a
class's two-space indent) has a parenthesis and its body's '{' ends that line or
one of the next few; the body ends at the first '}' with the same indent. Lambdas
and nested blocks count toward the function around them; one-line functions and
macros are skipped. A heuristic, not a parser: compare counts made with it only.
"""
import os, re, sys

SKIP = re.compile(r'^\s*(#|//|/\*|\*|template\s*<[^>]*>\s*$|(namespace|struct|class|enum|union|extern|for|if|while|switch|do|return|else|case)\b)')

def functions(path):
    lines = open(path, encoding='utf-8', errors='replace').read().split('\n')
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r'^( {0,2})(\S.*)$', line)
        if m and '(' in line and not SKIP.match(line) and not line.rstrip().endswith(';'):
            indent = m.group(1)
            # the signature may run over several lines: find the '{' that opens the body
            j = i
            while j < len(lines) and j < i + 6 and not lines[j].rstrip().endswith('{'):
                if lines[j].rstrip().endswith((';', '}')): break
                j += 1
            if j < len(lines) and lines[j].rstrip().endswith('{') and not lines[j].rstrip().endswith('= {'):
                end = j + 1
                while end < len(lines) and lines[end] != indent + '}' and not lines[end].startswith(indent + '}'):
                    if lines[end].startswith(indent) and len(lines[end]) > len(indent) and not lines[end][len(indent)].isspace() and lines[end].strip():
                        break  # something else at the same indent: not a body we understand
                    end += 1
                if end < len(lines) and lines[end].startswith(indent + '}'):
                    name = re.search(r'([~\w:]+)\s*\(', line)
                    yield (end - i + 1, i + 1, name.group(1) if name else line.strip())
                    i = end
        i += 1

def main():
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 80
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'src')
    found = []
    for d, _, names in os.walk(root):
        for n in names:
            if n.endswith(('.cpp', '.h', '.cu', '.cuh')):
                p = os.path.join(d, n)
                for length, line, name in functions(p):
                    if length > limit:
                        found.append((length, os.path.relpath(p, root), line, name))
    for length, rel, line, name in sorted(found, reverse=True):
        print(f'{length:5d}  {rel}:{line}  {name}')
    print(f'{len(found)} functions over {limit} lines')

main()
