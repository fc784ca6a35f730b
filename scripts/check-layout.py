#!/usr/bin/env python3
"""Layout rules of fs-core and fuse-uring (docs/ARCHITECTURE.md), checked from the source.

1. No source file over LIMIT lines (abi.rs, the kernel's structs, excepted).
2. The graph of module imports inside each crate has no cycle: module A depends on
   module B when A's non-test code names `crate::B...` (in a `use` or a path) or
   `super::B...`. Test code (`#[cfg(test)] mod ... {` to the end of the file, and
   files under a `tests/` directory) may use anything.
3. fuse-uring's layers: a module may depend only on modules of a lower or equal layer
   (LAYERS below): protocol at the bottom, the Filesystem trait, dispatch, transports
   and the session on top.

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


def strip_tests_and_comments(text):
    lines = text.split("\n")
    out = []
    for i, l in enumerate(lines):
        s = l.strip()
        if s.startswith("#[cfg(test)]"):
            nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
            if re.match(r"(pub(\(crate\))? )?mod \w+\s*\{", nxt) or re.match(r"(pub(\(crate\))? )?mod \w+;", nxt):
                if nxt.endswith(";"):
                    continue
                break
        if s.startswith("//"):
            continue
        out.append(re.sub(r"//.*$", "", l))
    return "\n".join(out)


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


def deps(modpath, text, known):
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
            if n > LIMIT and os.path.basename(p) != "abi.rs":
                bad.append(f"{os.path.relpath(p, ROOT)}: {n} lines (limit {LIMIT})")
        graph = {}
        for m, p in mods.items():
            if "tests" in m or m == ():
                continue
            text = strip_tests_and_comments(open(p, encoding="utf-8").read())
            graph[m] = {d for d in deps(m, text, mods) if "tests" not in d and d != ()}
        # a module depends on its children only through its own use lines; the
        # parent -> child edge of `mod x;` is not an import
        layers = LAYERS.get(crate, {})
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
        for v in sorted(graph):
            if v not in index:
                strong(v)
        for comp in out:
            names = sorted("::".join(c) for c in comp)
            bad.append(f"{crate}: import cycle between {', '.join(names)}")
    for b in bad:
        print(b)
    if bad:
        print(f"check-layout: {len(bad)} problems", file=sys.stderr)
        return 1
    print("check-layout: no file over %d lines, no import cycle, fuse-uring layers point down" % LIMIT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
