#!/usr/bin/env python3
"""Code-shape metrics for the before/after tables of refactoring issues.

usage: scripts/code_metrics.py [SRC_DIR]   (default: src)

Prints, as Markdown:
  - lines per top-level module (a folder under src/ or a file directly in it);
  - the 10 longest functions (brace-matched, string/comment aware);
  - the top-level module dependency graph (`crate::x` references) and its
    cycles (strongly connected components with more than one module).
"""
import os
import re
import sys
from collections import defaultdict

SRC = sys.argv[1] if len(sys.argv) > 1 else "src"


def rust_files(root):
    for d, _, files in os.walk(root):
        for f in sorted(files):
            if f.endswith(".rs"):
                yield os.path.join(d, f)


def top_module(path):
    rel = os.path.relpath(path, SRC)
    head = rel.split(os.sep)[0]
    return head[:-3] if head.endswith(".rs") else head


def strip_code(text):
    """Text with string/char literals and comments blanked (same length)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^'\\])'", text[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


FN = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")


def functions(path):
    text = open(path, encoding="utf-8").read()
    code = strip_code(text)
    for m in FN.finditer(code):
        # the body starts at the first `{` after the signature, unless a `;` comes first
        j = m.end()
        depth_paren = 0
        while j < len(code):
            ch = code[j]
            if ch in "(<[":
                depth_paren += 1
            elif ch in ")>]":
                depth_paren -= 1
            elif ch == ";" and depth_paren <= 0:
                j = -1
                break
            elif ch == "{" and depth_paren <= 0:
                break
            j += 1
        if j < 0 or j >= len(code):
            continue
        depth, k = 0, j
        while k < len(code):
            if code[k] == "{":
                depth += 1
            elif code[k] == "}":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        start = code.count("\n", 0, m.start()) + 1
        end = code.count("\n", 0, k) + 1
        yield (end - start + 1, os.path.relpath(path), start, m.group(1))


def main():
    lines = defaultdict(int)
    deps = defaultdict(set)
    fns = []
    for p in rust_files(SRC):
        text = open(p, encoding="utf-8").read()
        mod = top_module(p)
        lines[mod] += text.count("\n")
        code = strip_code(text)
        # only non-test code counts for dependencies
        cut = code.find("#[cfg(test)]")
        body = code if cut < 0 else code[:cut]
        for m in re.finditer(r"\bcrate::([a-z_][a-z0-9_]*)", body):
            if m.group(1) != mod:
                deps[mod].add(m.group(1))
        for m in re.finditer(r"\buse\s+crate::\{([^;]*)\}", body):
            for name in re.findall(r"(?:^|[,{]\s*)([a-z_][a-z0-9_]*)", m.group(1)):
                if name != mod and name not in ("self",):
                    deps[mod].add(name)
        fns.extend(functions(p))
    mods = sorted(lines)
    for k in list(deps):
        deps[k] &= set(mods)
    print("## Lines per top-level module\n")
    print("| module | lines |\n|---|---|")
    for m in sorted(mods, key=lambda m: -lines[m]):
        print(f"| {m} | {lines[m]} |")
    print(f"| **total** | {sum(lines.values())} |\n")
    print("## 10 longest functions\n")
    print("| lines | function | at |\n|---|---|---|")
    for n, path, start, name in sorted(fns, key=lambda t: -t[0])[:10]:
        print(f"| {n} | `{name}` | {path}:{start} |")
    print()
    # Tarjan SCC
    index, low, stack, on, sccs = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(deps.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            sccs.append(sorted(comp))

    for v in mods:
        if v not in index:
            strong(v)
    cycles = [c for c in sccs if len(c) > 1]
    print("## Top-level module dependencies\n")
    for m in mods:
        print(f"- {m} → {', '.join(sorted(deps.get(m, ()))) or '(none)'}")
    print(f"\n**cycles:** {len(cycles)}" + "".join(f"\n- {' ↔ '.join(c)}" for c in cycles))


if __name__ == "__main__":
    main()
