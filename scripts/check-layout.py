#!/usr/bin/env python3
"""Layout rules of fs-core and fuse-uring (docs/ARCHITECTURE.md), checked from the source.

1. No source file over LIMIT lines (abi.rs, the kernel's structs, excepted).
2. The graph of module imports inside each crate has no cycle, neither between files
   nor between top-level modules (a directory counts as one): module A depends on
   module B when A's non-test code names `crate::B...` (in a `use` or a path),
   `super::B...`, or an item the crate root re-exports from B (`crate::Item`, with
   `pub use B::Item` in lib.rs). `use crate::*` and `use crate as ...` are refused
   (they hide what is imported). Test code (the body of a `#[cfg(test)]` item, and
   files under a `tests/` directory) may use anything.
3. fuse-uring's layers: a module may depend only on modules of a lower or equal layer
   (LAYERS below): protocol at the bottom, the Filesystem trait, dispatch, transports
   and the session on top. Every top-level module must be in the table.

Usage: scripts/check-layout.py   (exit 1 and one line per violation)
"""
import os
import re
import sys

LIMIT = 900
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CRATES = ["fs-core", "fuse-uring"]
# fuse-uring: module (top-level) -> layer. Lower layers never import higher ones.
# A submodule (ring::entry) has its top-level module's layer. Mirrors the layer
# list in fuse-uring/src/lib.rs.
LAYERS = {
    "fuse-uring": {
        "abi": 0,  # protocol: the kernel's wire structs
        "request": 1,  # protocol: the decoder
        "stats": 1,  # per-opcode counters (abi only)
        "fs": 2,  # the Filesystem trait and its values
        "reply": 3,  # protocol: the encoder (of the trait's values)
        "slow": 3,  # the pool of threads for slow requests (reply buffers only)
        "dispatch": 4,  # request -> Filesystem call -> reply; INIT negotiation
        "transport": 5,  # choosing/reporting the transport; /sys and /proc facts
        "dev": 5,  # the /dev/fuse device: fd, read/write loop, notify, backing ids
        "ring": 6,  # the io_uring transport (on dev's FuseDev)
        "session": 7,  # mount, INIT, run, unmount
    },
}

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def modules(src):
    """Maps module path tuples to files, for every .rs under src."""
    out = {}
    for d, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            p = os.path.join(d, f)
            rel = os.path.relpath(p, src)[:-3].split(os.sep)
            if rel[-1] in ("mod", "lib", "main"):
                rel = rel[:-1]
            out[tuple(rel)] = p
    return out


def strip_comments(text):
    """Removes // and /* */ comments and the contents of string literals."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    out.append("\n" if text[i] == "\n" else "")
                    i += 1
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i : i + 4]):
            m = re.match(r"'(\\.|[^\\'])'", text[i : i + 4])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strip_tests_and_comments(text):
    """The non-test code of a file: every item under `#[cfg(test)]` (a module
    with its braces, a `use`, a function) is removed, whatever attributes
    stand between."""
    text = strip_comments(text)
    out, i, n = [], 0, len(text)
    while i < n:
        m = re.compile(r"#\[cfg\(test\)\]").search(text, i)
        if not m:
            out.append(text[i:])
            break
        out.append(text[i : m.start()])
        j = m.end()
        # skip further attributes
        while True:
            k = re.compile(r"\s*#\[[^\]]*\]").match(text, j)
            if not k:
                break
            j = k.end()
        # the item: up to its `;` or the end of its first brace block
        depth = 0
        while j < n:
            ch = text[j]
            if ch == ";" and depth == 0:
                j += 1
                break
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    j += 1
                    break
            j += 1
        i = j
    return "".join(out)


def use_paths(text):
    """Every path named by a `use` tree, expanded: `use crate::{a::X, b::{c, d}}`."""
    paths = []
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        tree = re.sub(r"\s+", "", m.group(1))
        paths.extend(expand(tree))
    return paths


def expand(tree):
    # split top-level "prefix::{...}" groups
    i = tree.find("{")
    if i < 0:
        return [tree]
    prefix = tree[:i]
    depth, j = 0, i
    for j in range(i, len(tree)):
        if tree[j] == "{":
            depth += 1
        elif tree[j] == "}":
            depth -= 1
            if depth == 0:
                break
    inner = tree[i + 1 : j]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    if cur:
        parts.append(cur)
    out = []
    for p in parts:
        out.extend(expand(prefix + p))
    return out


def root_exports(lib_text):
    """Names the crate root re-exports: name -> module path, from `pub use a::b::Name`."""
    out = {}
    for p in use_paths(strip_tests_and_comments(lib_text)):
        if not p or p.startswith("crate::"):
            p = p[len("crate::"):] if p.startswith("crate::") else p
        segs = [x for x in p.split("::") if x]
        if len(segs) >= 2:
            name = segs[-1]
            if " as " in name:
                name = name.split(" as ")[-1]
            if name == "*":
                out["*" + segs[0]] = (segs[0],)
            else:
                out[name] = tuple(segs[:-1])
    return out


def deps(modpath, text, known, exports):
    found = set()
    cands = use_paths(text)
    cands += re.findall(r"(?:crate|super)(?:::" + IDENT + ")+", text)
    for c in cands:
        segs = c.split("::")
        if segs[0] == "crate":
            base = []
            segs = segs[1:]
        elif segs[0] == "super":
            base = list(modpath)
            while segs and segs[0] == "super":
                base = base[:-1]
                segs = segs[1:]
        else:
            continue
        if not base and segs and segs[0] in exports and tuple(segs[:1]) not in known:
            segs = list(exports[segs[0]]) + segs[1:]
        full = tuple(base + segs)
        # the longest prefix that is a module of the crate
        for k in range(len(full), 0, -1):
            if full[:k] in known:
                target = full[:k]
                if target != modpath and modpath[: len(target)] != target:
                    found.add(target)
                break
    return found


def main():
    bad = []
    for crate in CRATES:
        src = os.path.join(ROOT, crate, "src")
        mods = modules(src)
        for m, p in mods.items():
            n = sum(1 for _ in open(p, encoding="utf-8"))
            if n > LIMIT and os.path.relpath(p, ROOT) != "fuse-uring/src/abi.rs":
                bad.append(f"{os.path.relpath(p, ROOT)}: {n} lines (limit {LIMIT})")
        exports = root_exports(open(mods[()], encoding="utf-8").read())
        graph = {}
        for m, p in mods.items():
            if "tests" in m or m == ():
                continue
            text = strip_tests_and_comments(open(p, encoding="utf-8").read())
            if re.search(r"\buse\s+crate\s*::\s*\*", text) or re.search(r"\buse\s+crate\s+as\b", text):
                bad.append(f"{os.path.relpath(p, ROOT)}: `use crate::*` / `use crate as` hides what is imported; name the modules")
            graph[m] = {d for d in deps(m, text, mods, exports) if "tests" not in d and d != ()}
        # top-level modules (a directory is one module) must not form cycles either
        top = {}
        for m, ds in graph.items():
            top.setdefault(m[:1], set()).update(d[:1] for d in ds if d[:1] != m[:1])
        # a module depends on its children only through its own use lines; the
        # parent -> child edge of `mod x;` is not an import
        layers = LAYERS.get(crate, {})
        if layers:
            for t in sorted(top):
                if t[0] not in layers:
                    bad.append(f"{crate}: module {t[0]} is not in check-layout.py's LAYERS table: give it a layer")
        for m, ds in sorted(graph.items()):
            for d in sorted(ds):
                lm, ld = layers.get(m[0]), layers.get(d[0])
                if lm is not None and ld is not None and ld > lm:
                    bad.append(f"{crate}: {'::'.join(m)} (layer {lm}) imports {'::'.join(d)} (layer {ld}): arrows point down")
        # cycles (Tarjan)
        index, low, stack, on, out = {}, {}, [], set(), []
        counter = [0]

        def strong(v):
            index[v] = low[v] = counter[0]
            counter[0] += 1
            stack.append(v)
            on.add(v)
            for w in graph.get(v, ()):
                if w not in graph:
                    continue
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
                if len(comp) > 1:
                    out.append(comp)

        sys.setrecursionlimit(10000)
        for level, g in (("files", graph), ("top-level modules", top)):
            graph_saved = graph
            graph = g
            index, low, stack, on, out = {}, {}, [], set(), []
            counter[0] = 0
            for v in sorted(graph):
                if v not in index:
                    strong(v)
            for comp in out:
                names = sorted("::".join(c) for c in comp)
                bad.append(f"{crate}: import cycle between {level} {', '.join(names)}")
            graph = graph_saved
    for b in bad:
        print(b)
    if bad:
        print(f"check-layout: {len(bad)} problems", file=sys.stderr)
        return 1
    print("check-layout: no file over %d lines, no import cycle, fuse-uring layers point down" % LIMIT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
