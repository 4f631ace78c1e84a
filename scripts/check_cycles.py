#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""check_cycles.py — fails on a cycle of calls or includes in the product, or between its folders.

DESIGN.md: "No cycle of calls between .c files", and issue 28: the include
graph has no cycle, and dependencies between folders flow one way. Three
checks, each printed with the edges that tie every cycle it finds:

1. Calls between .c files. Includes alone do not show such a cycle (a
   module may be declared in another's header), so this reads the
   definitions themselves. Universal Ctags (Debian's `universal-ctags`)
   lists every function and global variable each product .c file defines
   (fs/ core/ ssd/ gpu/ client/ rados/, never tests/ or examples/). A
   static definition is visible in its own file only, so it never ties two
   files; a name defined non-static in several files is reported (and tied
   to each of them). Each .c file is tokenized with its comments, string
   and character literals and struct/union/enum tags removed; an
   identifier token that names a non-static definition of another file is
   a use of that file: an edge from the user to the definer (unless the
   user defines the name statically itself, which shadows it). Printed as
   `a.c <-> b.c`, then `  a.c -> b.c: names` for each edge inside it.
2. Includes between product files (.c and .h, and the public headers in
   include/): each `#include "..."` outside comments, resolved as the build
   does (the including file's folder, then the checkout's root, then
   include/), is an edge to that file; one that resolves to no file here
   (a system or generated header) is none. Printed as `a.h <-> b.h`, then
   `  a.h -> b.h: #include "b.h"`.
3. Folders: fs, core, ssd, gpu, client, rados (the top folder of each
   product file). Folder A uses folder B when a file of A includes a file
   of B, or calls into one (check 1's edges). Printed as `core <-> rados`,
   then for each edge inside it `  core -> rados:` and, one a line, the
   includes and calls that make it.

Tarjan's algorithm finds the strongly connected components of each graph:
every component of more than one node is a cycle.

Usage: check_cycles.py [--root DIR] [DIR ...]   (default: the checkout this
script sits in, and the folders above). Exits 0 with no cycle, 1 with one,
2 when it cannot run (no ctags).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

PRODUCT_DIRS = ("fs", "core", "ssd", "gpu", "client", "rados")
EXCLUDED = ("tests", "examples")
PUBLIC_INCLUDE = "include"  # the public ABI's headers, on the build's include path

# Comments, string and character literals, in one pass so that a quote in a
# comment or a comment marker in a string is never misread.
_STRIP = re.compile(
    r"""
      /\*.*?\*/                 # block comment
    | //[^\n]*                  # line comment
    | "(?:\\.|[^"\\\n])*"       # string literal
    | '(?:\\.|[^'\\\n])*'       # character literal
    """,
    re.S | re.X,
)
_IDENT = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")


def strip_source(text):
    """text with comments and literals replaced by a space (newlines kept)."""
    def blank(m):
        return " " + "\n" * m.group(0).count("\n")
    return _STRIP.sub(blank, text)


def product_files(root, dirs, exts=(".c",)):
    """The product files (names ending in one of exts) under root/dirs, relative to root, sorted."""
    out = []
    for d in dirs:
        top = os.path.join(root, d)
        if not os.path.isdir(top):
            continue
        for cur, subdirs, files in os.walk(top):
            subdirs[:] = sorted(s for s in subdirs if s not in EXCLUDED)
            for f in files:
                if f.endswith(exts):
                    out.append(os.path.normpath(os.path.relpath(os.path.join(cur, f), root)))
    return sorted(set(out))


def definitions(root, files):
    """{file: {name: is_static}} for the functions and global variables each file defines."""
    defs = {f: {} for f in files}
    lines = {}  # path -> its stripped lines, read when needed
    if not files:
        return defs
    cmd = ["ctags", "--output-format=json", "--languages=C", "--language-force=C",
           "--kinds-C=fv", "--fields=+Kn", "-f", "-"] + files
    r = subprocess.run(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        raise SystemExit("check_cycles: ctags failed (exit %d)" % r.returncode)
    for line in r.stdout.splitlines():
        try:
            tag = json.loads(line)
        except ValueError:
            continue
        if tag.get("_type") != "tag" or tag.get("kind") not in ("function", "variable"):
            continue
        if tag.get("scope"):  # a static local, or a member ctags took for a variable
            continue
        if tag["name"] == "main":  # one per program, called by nobody
            continue
        path = os.path.normpath(tag["path"])
        if path not in defs:
            continue
        static = bool(tag.get("file"))
        if not static and tag["kind"] == "variable":
            static = _static_aggregate(root, path, tag.get("line", 0), lines)
        # A name both declared static and defined (a forward declaration) stays static.
        defs[path][tag["name"]] = defs[path].get(tag["name"], False) or static
    return defs


def _static_aggregate(root, path, line, cache):
    """Whether the variable declared at path:line is static after all.

    ctags does not see the storage class of `static struct { ... } name;`:
    read it on the declaration's line, or (`} name;`) walk back to the line
    that opens the braces and read it there.
    """
    if path not in cache:
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            cache[path] = strip_source(f.read()).split("\n")
    src = cache[path]
    if not 0 < line <= len(src):
        return False
    if not src[line - 1].lstrip().startswith("}"):
        return re.match(r"\s*static\b", src[line - 1]) is not None
    depth = 0
    for i in range(line - 1, -1, -1):
        depth += src[i].count("}") - src[i].count("{")
        if depth <= 0:
            return re.match(r"\s*static\b", src[i]) is not None
    return False


_TAG = re.compile(r"\b(?:struct|union|enum)\s+[A-Za-z_][A-Za-z0-9_]*")


def uses(root, path):
    """The identifier tokens in path, comments, literals and struct/union/enum tags removed.

    A tag lives in a namespace of its own: `struct kv_store_usage` does not
    use the function kv_store_usage.
    """
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        text = _TAG.sub(" ", strip_source(f.read()))
    return set(_IDENT.findall(text))


def build_graph(root, files):
    """(edges {a: {b: sorted names}}, duplicates {name: [files]})."""
    defs = definitions(root, files)
    exported = {}  # name -> files that define it non-static
    for f, names in defs.items():
        for n, static in names.items():
            if not static:
                exported.setdefault(n, []).append(f)
    duplicates = {n: sorted(fs) for n, fs in exported.items() if len(fs) > 1}
    edges = {f: {} for f in files}
    for f in files:
        own = defs[f]
        for n in uses(root, f):
            if n in own:  # its own definition (static or not) is the one it means
                continue
            for g in exported.get(n, ()):
                edges[f].setdefault(g, set()).add(n)
    return {f: {g: sorted(ns) for g, ns in e.items()} for f, e in edges.items()}, duplicates


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"', re.M)


def strip_comments(text):
    """text with comments replaced by a space (newlines kept), literals left as they are."""
    def blank(m):
        t = m.group(0)
        if t[0] in "\"'":
            return t
        return " " + "\n" * t.count("\n")
    return _STRIP.sub(blank, text)


def resolve_include(root, path, spelt):
    """The file `#include "spelt"` in path names, relative to root, or None.

    Searched as the build does: path's own folder, then the root (every
    target's include directory), then include/ (the public headers').
    """
    for base in (os.path.dirname(path), "", PUBLIC_INCLUDE):
        cand = os.path.normpath(os.path.join(base, spelt))
        if cand.startswith(".." + os.sep) or os.path.isabs(cand):
            continue
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


def include_graph(root, files):
    """{a: {b: [spellings]}}: the files of `files` each one includes with #include "...".

    Only edges between files of `files`; an include outside them (a system
    or generated header, a test's) is not followed.
    """
    known = set(files)
    edges = {f: {} for f in files}
    for f in files:
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            text = strip_comments(fh.read())
        for spelt in _INCLUDE.findall(text):
            g = resolve_include(root, f, spelt)
            if g in known and g != f:
                edges[f].setdefault(g, set()).add(spelt)
    return {f: {g: sorted(sp) for g, sp in e.items()} for f, e in edges.items()}


def folder_of(path):
    """The product folder a file belongs to: its top folder."""
    return path.split(os.sep, 1)[0]


def folder_graph(calls, includes, folders):
    """{A: {B: [tie lines]}}: folder A uses folder B, and the includes and calls that make it.

    Only folders in `folders` (include/'s headers belong to none).
    """
    ties = {d: {} for d in folders}
    for a, e in includes.items():
        for b, spelt in e.items():
            fa, fb = folder_of(a), folder_of(b)
            if fa != fb and fa in ties and fb in ties:
                for sp in spelt:
                    ties[fa].setdefault(fb, []).append('%s: #include "%s"' % (a, sp))
    for a, e in calls.items():
        for b, names in e.items():
            fa, fb = folder_of(a), folder_of(b)
            if fa != fb and fa in ties and fb in ties:
                ties[fa].setdefault(fb, []).append("%s -> %s: %s" % (a, b, ", ".join(names)))
    return {a: {b: sorted(t) for b, t in e.items()} for a, e in ties.items()}


def tarjan(nodes, edges):
    """Strongly connected components of the graph, each sorted, iteratively."""
    index = {}
    low = {}
    on_stack = set()
    stack = []
    comps = []
    counter = 0
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                comps.append(sorted(comp))
    return comps


def report(nodes, edges, show):
    """Prints each cycle of the graph and, by show(a, b, tie), its edges; returns the cycles."""
    cycles = sorted(c for c in tarjan(nodes, edges) if len(c) > 1)
    for c in cycles:
        print(" <-> ".join(c))
        members = set(c)
        for a in c:
            for b in sorted(edges[a]):
                if b in members:
                    show(a, b, edges[a][b])
    return cycles


def summary(cycles, what, nodes, nedges, uses):
    """The closing line of one check."""
    if cycles:
        return "check_cycles: %d cycle(s) among %d %s (%d %s)" % (len(cycles), nodes, what,
                                                                nedges, uses)
    return "check_cycles: no cycle among %d %s (%d %s)" % (nodes, what, nedges, uses)


def main(argv=None):
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=here, help="the checkout (default: %(default)s)")
    ap.add_argument("dirs", nargs="*", default=list(PRODUCT_DIRS),
                    help="product folders under the root (default: %s)" % " ".join(PRODUCT_DIRS))
    args = ap.parse_args(argv)
    if not shutil.which("ctags"):
        print("check_cycles: ctags not found (install universal-ctags)", file=sys.stderr)
        return 2
    root = os.path.abspath(args.root)

    # 1. calls between .c files
    files = product_files(root, args.dirs)
    edges, duplicates = build_graph(root, files)
    for n in sorted(duplicates):
        print("warning: %s defined non-static in %s" % (n, ", ".join(duplicates[n])))
    call_cycles = report(files, edges, lambda a, b, names: print(
        "  %s -> %s: %s" % (a, b, ", ".join(names))))
    print(summary(call_cycles, ".c files", len(files),
                  sum(len(e) for e in edges.values()), "uses between files"))

    # 2. includes between .c and .h files (and include/'s headers)
    sources = product_files(root, args.dirs, (".c", ".h"))
    sources = sorted(set(sources + product_files(root, [PUBLIC_INCLUDE], (".h",))))
    incs = include_graph(root, sources)
    inc_cycles = report(sources, incs, lambda a, b, spelt: print(
        "  %s -> %s: %s" % (a, b, ", ".join('#include "%s"' % sp for sp in spelt))))
    print(summary(inc_cycles, ".c and .h files", len(sources),
                  sum(len(e) for e in incs.values()), "includes between files"))

    # 3. folders, through includes and calls
    folders = sorted({folder_of(f) for f in sources if folder_of(f) != PUBLIC_INCLUDE})
    ties = folder_graph(edges, incs, folders)

    def show_ties(a, b, lines):
        print("  %s -> %s:" % (a, b))
        for t in lines:
            print("    " + t)
    dir_cycles = report(folders, ties, show_ties)
    print(summary(dir_cycles, "folders", len(folders),
                  sum(len(e) for e in ties.values()), "uses between folders"))
    return 1 if call_cycles or inc_cycles or dir_cycles else 0


if __name__ == "__main__":
    sys.exit(main())
