#!/usr/bin/env python3
"""Code-shape metrics for the before/after tables of refactoring issues.

usage: python3 scripts/code_metrics.py [SRC_DIR] [--check MAX_UPWARD]
       (SRC_DIR defaults to src)

Prints, as Markdown:
  - lines per top-level module (a folder under src/ or a file directly in it);
  - the 10 longest functions (brace-matched, string/comment aware);
  - the top-level module dependency graph (`crate::x` references) and its
    cycles (strongly connected components with more than one module);
  - the file-level import graph: an edge A -> B when file A names an item of
    file B, through a `use` declaration (nested braces, `self`, `super`,
    `crate`, `as` renames, globs) or a path in code (`crate::a::b(..)`,
    `super::c::D`, `self::e::f`, or a path through a name brought in by a
    `use`, such as `job::BuildParams` after `use super::job;`). A module path
    maps to the file of its LONGEST prefix that is a module file
    (`crate::a::b::C` is src/a/b.rs or src/a/b/mod.rs); a path through a
    `pub use` in a mod.rs stays on that mod.rs (the re-export is itself an
    import, counted as mod.rs -> child), while the crate root lib.rs, a pure
    facade, is looked through to the file its `pub use` names (`crate::Error`
    is src/error.rs). src/main.rs and the files it declares (src/cli/**) form
    the binary crate, where `parqivf::x` is the library's `crate::x` and
    `crate::` is main.rs's tree. Files are found from lib.rs and main.rs by
    their `mod x;` declarations, so files of `#[cfg(test)] mod x;` are left
    out, as are `#[cfg(test)]` items (`mod tests { .. }`) and edges from a
    file to itself; `mod x;` declarations are not edges;
  - the file-level circles (strongly connected components of more than one
    file, those inside one folder included), each with, per edge inside it,
    up to 3 of the names imported;
  - the upward imports: file-level edges from a lower layer to a higher one,
    by the layer order of top-level modules in LAYERS below.

With `--check MAX_UPWARD` it exits 1, after printing, when there is any
file-level circle or more than MAX_UPWARD upward imports; without it, 0.
"""
import os
import re
import sys
from collections import defaultdict

SRC = "src"  # set from the command line in main()

# Layers of top-level modules, lowest first: a module may import from its own
# layer and the ones before it. Derived from the top-level dependency graph
# printed above: leaf compute (distance, topk, vector_file, quant, kmeans),
# then storage (store), filters, the snapshot format, the catalog readers,
# the postings writer, the probe (the query engine and the one postings
# reader), verify (which reads through the probe), the index that is the
# engine's face, and the builder. `error` defines the crate-wide error that
# wraps each module's error (builder's being the highest), so it comes right
# after the builder: a module below it that used `crate::Error` or
# `crate::Result` would import upward, while the consumers above it
# (quickstart, server) use it as they use any lower module. `lib` (the crate
# root) comes next, and the binary (`cli`, then `main.rs` that declares it)
# on top. A top-level module missing from this list is reported, and its
# edges are not judged.
LAYERS = [
    "distance", "topk", "vector_file", "quant", "kmeans", "store", "filter",
    "format", "catalog", "postings", "probe", "verify", "index", "builder",
    "error", "quickstart", "server", "lib", "cli", "main",
]


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


# ---------------------------------------------------------------- file level

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
PATH = re.compile(r"(?<![A-Za-z0-9_$])(?<!::)(?:r#)?(" + IDENT + r"(?:\s*::\s*" + IDENT + r")+)")
USE = re.compile(r"(?<![A-Za-z0-9_])(pub(?:\s*\([^)]*\))?\s+)?use\s+(?!<)([^;]*);")
TEST_ATTR = re.compile(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]")
INLINE_MOD = re.compile(r"(?<![A-Za-z0-9_])mod\s+(" + IDENT + r")\s*\{")
MOD_DECL = re.compile(r"(?<![A-Za-z0-9_])mod\s+(" + IDENT + r")\s*;")


def blank(code, i, j):
    return code[:i] + re.sub(r"[^\n]", " ", code[i:j]) + code[j:]


def match_brace(code, j):
    """Index just past the `}` matching the `{` at code[j]."""
    depth = 0
    for k in range(j, len(code)):
        if code[k] == "{":
            depth += 1
        elif code[k] == "}":
            depth -= 1
            if depth == 0:
                return k + 1
    return len(code)


def drop_test_items(code):
    """Blanks every `#[cfg(test)]` item: `mod tests { .. }`, `mod x;`, a fn..."""
    while True:
        m = TEST_ATTR.search(code)
        if not m:
            return code
        j, depth = m.end(), 0
        while j < len(code):
            ch = code[j]
            if ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
            elif depth == 0 and ch == ";":
                j += 1
                break
            elif depth == 0 and ch == "{":
                j = match_brace(code, j)
                break
            j += 1
        code = blank(code, m.start(), j)


def module_files(root):
    """{file: (crate, module path)} for the files reached from lib.rs and
    main.rs by `mod x;` declarations outside `#[cfg(test)]` items."""
    found = {}
    todo = [(os.path.join(root, r), c) for r, c in (("lib.rs", "lib"), ("main.rs", "bin"))]
    todo = [(p, c, ()) for p, c in todo if os.path.exists(p)]
    while todo:
        path, crate, mod = todo.pop()
        if path in found:
            continue
        found[path] = (crate, mod)
        code = drop_test_items(strip_code(open(path, encoding="utf-8").read()))
        base = os.path.basename(path)
        folder = os.path.dirname(path) if base in ("lib.rs", "main.rs", "mod.rs") else path[:-3]
        # a `mod x;` inside an inline `mod a { .. }` lives in folder/a/x.rs
        spans = [(m.group(1), m.end() - 1, match_brace(code, m.end() - 1)) for m in INLINE_MOD.finditer(code)]
        for m in MOD_DECL.finditer(code):
            inner = [name for name, a, b in spans if a < m.start() < b]
            sub = os.path.join(folder, *inner, m.group(1))
            for cand in (sub + ".rs", os.path.join(sub, "mod.rs")):
                parts = set(os.path.relpath(cand, root).split(os.sep))
                if os.path.exists(cand) and not parts & {"tests", "benches"}:
                    todo.append((cand, crate, mod + tuple(inner) + (m.group(1),)))
                    break
    return found


def parse_use_tree(text):
    """`a::{b, c::{self, D as E}, *}` -> [(segments, alias or None, glob)]."""
    toks = re.findall(r"::|[{},*]|" + IDENT, text)
    pos = [0]

    def peek():
        return toks[pos[0]] if pos[0] < len(toks) else None

    def take():
        pos[0] += 1
        return toks[pos[0] - 1]

    def tree(prefix):
        out = []
        segs = list(prefix)
        if peek() == "::":  # a leading `::` names an external crate
            take()
            segs.append("::")
        while True:
            t = peek()
            if t is None:
                return out
            if t == "{":
                take()
                while peek() not in (None, "}"):
                    out += tree(segs)
                    if peek() == ",":
                        take()
                if peek() == "}":
                    take()
                return out
            if t == "*":
                take()
                return out + [(segs, None, True)]
            if t in (",", "}"):
                return out
            name = take()
            if not (name == "self" and segs):  # `a::{self}` is `a` itself
                segs.append(name)
            if peek() == "::":
                take()
                continue
            alias = None
            if peek() == "as":
                take()
                alias = take()
            return out + [(segs, alias, False)]

    return tree([])


class Resolver:
    def __init__(self, root):
        self.root = root
        self.files = module_files(root)
        self.by_mod = {v: k for k, v in self.files.items()}
        self.modules = set(self.files.values())  # (crate, path), inline ones added below
        self.reexports = {}  # lib root name -> absolute path it re-exports

    def crate_of(self, crate, segs, cur):
        """Absolute (crate, path) of `segs` used in module `cur`, or None."""
        crate0 = crate
        first, rest = segs[0], list(segs[1:])
        if first == "crate":
            return crate0, tuple(rest)
        if first == "parqivf" and crate0 == "bin":
            return "lib", tuple(rest)
        if first == "self":
            return crate0, tuple(cur) + tuple(rest)
        if first == "super":
            mod = list(cur)
            for s in segs:
                if s != "super":
                    break
                if not mod:
                    return None
                mod.pop()
            n = len(segs) - len([s for s in segs if s != "super"])
            return crate0, tuple(mod) + tuple(segs[n:])
        if (crate0, tuple(cur) + (first,)) in self.modules:
            return crate0, tuple(cur) + tuple(segs)
        return None

    def target(self, crate, path, hops=0):
        """(file, name) for an absolute path: the longest module-file prefix."""
        for k in range(len(path), -1, -1):
            f = self.by_mod.get((crate, path[:k]))
            if f:
                # a path that ends on the module itself imports the module
                name = path[k] if k < len(path) else (path[-1] if path else "crate") + " (module)"
                if crate == "lib" and k == 0 and path and path[0] in self.reexports and hops < 4:
                    c2, p2 = self.reexports[path[0]]
                    return self.target(c2, p2 + path[1:], hops + 1)
                return f, name
        return None


def file_graph(root):
    """({(src, dst): [names]}, Resolver) for the files under root."""
    r = Resolver(root)
    codes = {}
    for f in r.files:
        code = drop_test_items(strip_code(open(f, encoding="utf-8").read()))
        spans = []
        for m in INLINE_MOD.finditer(code):
            spans.append((m.group(1), m.end() - 1, match_brace(code, m.end() - 1)))
        codes[f] = (code, spans)
        crate, mod = r.files[f]
        for name, a, b in spans:
            inner = [n for n, x, y in spans if x < a and b <= y]
            r.modules.add((crate, mod + tuple(inner) + (name,)))

    def mod_at(f, i):
        crate, mod = r.files[f]
        _, spans = codes[f]
        return mod + tuple(n for n, a, b in spans if a < i < b)

    # use declarations, resolved in passes so that `use a::b;` may go through
    # a name an earlier `use` brought in
    uses = {}  # file -> [(start, end, is_pub, segs, alias, glob)]
    for f, (code, _) in codes.items():
        uses[f] = [(m.start(), m.end(), bool(m.group(1)), leaf)
                   for m in USE.finditer(code) for leaf in parse_use_tree(m.group(2))]
    aliases = defaultdict(dict)  # (file, module) -> {name: (crate, path)}
    resolved = {}
    for _ in range(3):
        for f, items in uses.items():
            crate = r.files[f][0]
            for n, (a, b, pub, (segs, alias, glob)) in enumerate(items):
                if (f, n) in resolved or not segs or segs[0] == "::":
                    continue
                cur = mod_at(f, a)
                hit = r.crate_of(crate, segs, cur)
                if hit is None and segs[0] in aliases[(f, cur)]:
                    c2, p2 = aliases[(f, cur)][segs[0]]
                    hit = c2, p2 + tuple(segs[1:])
                if hit is None:
                    continue
                resolved[(f, n)] = hit
                if not glob:
                    aliases[(f, cur)][alias or segs[-1]] = hit
                    if pub and r.files[f] == ("lib", ()):
                        r.reexports[alias or segs[-1]] = hit

    edges = defaultdict(list)

    def add(f, hit, glob=False):
        t = r.target(*hit)
        if t and t[0] != f:
            name = "*" if glob else t[1]
            if name not in edges[(f, t[0])]:
                edges[(f, t[0])].append(name)

    for f, items in uses.items():
        for n, (a, b, pub, (segs, alias, glob)) in enumerate(items):
            if (f, n) in resolved:
                add(f, resolved[(f, n)], glob)
    for f, (code, _) in codes.items():
        crate = r.files[f][0]
        for a, b, *_ in uses[f]:
            code = blank(code, a, b)
        for m in PATH.finditer(code):
            segs = re.split(r"\s*::\s*", m.group(1))
            cur = mod_at(f, m.start())
            hit = r.crate_of(crate, segs, cur)
            if hit is None and segs[0] in aliases[(f, cur)]:
                c2, p2 = aliases[(f, cur)][segs[0]]
                hit = c2, p2 + tuple(segs[1:])
            if hit is not None:
                add(f, hit)
    return edges, r


def tarjan(nodes, succ):
    """Strongly connected components, each sorted, of the graph succ."""
    index, low, stack, on, sccs = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(succ.get(v, ())):
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

    for v in sorted(nodes):
        if v not in index:
            strong(v)
    return sccs


def file_level(root):
    """Prints the file-level sections; returns (circles, upward imports)."""
    edges, r = file_graph(root)

    def rel(f):
        return os.path.relpath(f, root).replace(os.sep, "/")

    def names(key):
        ns = [n for n in edges[key] if not n.endswith(" (module)")] or edges[key]
        return ", ".join(ns[:3]) + (f", … (+{len(ns) - 3})" if len(ns) > 3 else "")

    succ = defaultdict(set)
    for a, b in edges:
        succ[a].add(b)
    files = sorted(r.files, key=rel)
    print("\n## File-level imports\n")
    print(f"{len(files)} files, {len(edges)} edges (A → B: A imports the names from B).\n")
    for f in files:
        outs = sorted(succ.get(f, ()), key=rel)
        print(f"- {rel(f)} → " + (", ".join(rel(t) for t in outs) or "(none)"))
    skipped = sorted(rel(p) for p in rust_files(root) if p not in r.files)
    if skipped:
        print(f"\nNot reached from lib.rs/main.rs (test modules, orphans): {', '.join(skipped)}")

    circles = [c for c in tarjan(files, succ) if len(c) > 1]
    circles.sort(key=lambda c: [rel(f) for f in c])
    print("\n## File-level circles\n")
    print(f"**file-level circles:** {len(circles)}")
    for c in circles:
        inside = set(c)
        print(f"\n- {' ↔ '.join(rel(f) for f in sorted(c, key=rel))}")
        for a in sorted(c, key=rel):
            for b in sorted(succ[a] & inside, key=rel):
                print(f"  - {rel(a)} → {rel(b)}: {names((a, b))}")
        # a circle through a mod.rs facade hides the circles among its
        # children: show those left once the edges to and from mod.rs go
        facades = [f for f in c if os.path.basename(f) == "mod.rs"]
        if facades and len(c) > 2:
            rest = inside - set(facades)
            sub = {a: succ[a] & rest for a in rest}
            left = [s for s in tarjan(rest, sub) if len(s) > 1]
            print("  - without the mod.rs edges: " + (
                "; ".join(" ↔ ".join(rel(f) for f in sorted(s, key=rel)) for s in left) or "no circle"))

    rank = {m: i for i, m in enumerate(LAYERS)}
    upward, unknown = [], set()
    for (a, b) in sorted(edges, key=lambda e: (rel(e[0]), rel(e[1]))):
        ma, mb = top_module(a), top_module(b)
        if ma == mb:
            continue
        if ma not in rank or mb not in rank:
            unknown |= {m for m in (ma, mb) if m not in rank}
            continue
        if rank[mb] > rank[ma]:
            upward.append((a, b))
    print("\n## Upward imports\n")
    print("Layers, lowest first: " + " < ".join(LAYERS) + "\n")
    print(f"**upward imports:** {len(upward)}")
    for a, b in upward:
        print(f"- {rel(a)} → {rel(b)}: {names((a, b))}")
    if unknown:
        print(f"\nModules missing from LAYERS (their edges not judged): {', '.join(sorted(unknown))}")
    return len(circles), len(upward)


def main():
    global SRC
    args = sys.argv[1:]
    max_upward = None
    if "--check" in args:
        k = args.index("--check")
        if k + 1 >= len(args) or not args[k + 1].isdigit():
            sys.exit("usage: code_metrics.py [SRC_DIR] [--check MAX_UPWARD]")
        max_upward = int(args[k + 1])
        del args[k:k + 2]
    if len(args) > 1:
        sys.exit("usage: code_metrics.py [SRC_DIR] [--check MAX_UPWARD]")
    SRC = args[0] if args else "src"
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
    sccs = tarjan(mods, deps)
    cycles = [c for c in sccs if len(c) > 1]
    print("## Top-level module dependencies\n")
    for m in mods:
        print(f"- {m} → {', '.join(sorted(deps.get(m, ()))) or '(none)'}")
    print(f"\n**cycles:** {len(cycles)}" + "".join(f"\n- {' ↔ '.join(c)}" for c in cycles))
    circles, upward = file_level(SRC)
    if max_upward is not None and (circles or upward > max_upward):
        print(f"\ncheck failed: {circles} file-level circle(s), {upward} upward import(s) (at most {max_upward})")
        sys.exit(1)


if __name__ == "__main__":
    main()
