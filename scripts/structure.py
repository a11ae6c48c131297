#!/usr/bin/env python3
"""Checks the code's shape as issue 30 set it: no function over --max-fn
lines, no file over --max-file lines, and no import circle between the
modules of a crate (at module depths 1 to 3: `lower` and `lower::nest`).
A module's children using it (`super::`) are not circles; siblings and
anything else are. Exits 1 and lists what breaks a rule.

    scripts/structure.py                # every workspace crate's src/
    scripts/structure.py --max-fn 100 device

scripts/test.sh runs it first, so CI (.ci/run) fails on what it reports.
"""
import argparse, os, re, sys

FN = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+"C"\s+)?fn\s+(\w+)')


def code(line):
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    i = line.find('//')
    return line if i < 0 else line[:i]


def sources(src):
    for dp, _, fns in os.walk(src):
        for f in sorted(fns):
            if f.endswith('.rs'):
                yield os.path.join(dp, f)


def long_functions(path, limit):
    lines = open(path, errors='replace').read().split('\n')
    for i, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        depth, started, j = 0, False, i
        while j < len(lines):
            s = code(lines[j])
            if not started and s.rstrip().endswith(';') and '{' not in s:
                break
            for c in s:
                if c == '{':
                    depth += 1
                    started = True
                elif c == '}':
                    depth -= 1
            if started and depth == 0:
                break
            j += 1
        if started and j - i + 1 > limit:
            yield (j - i + 1, i + 1, m.group(7))


def circles(src, depth):
    mods = {}
    for p in sources(src):
        parts = os.path.relpath(p, src)[:-3].split('/')
        if parts[-1] in ('mod', 'lib', 'main'):
            parts = parts[:-1]
        mods['::'.join(parts)] = open(p).read()

    def key(path):
        parts = path.split('::')[:depth]
        while parts and '::'.join(parts) not in mods:
            parts = parts[:-1]
        return '::'.join(parts)

    graph = {}
    for m, text in mods.items():
        text = re.sub(r'//[^\n]*', '', text)
        cut = text.find('#[cfg(test)]')
        if cut >= 0:
            text = text[:cut]
        me = key(m) if m else ''
        base = m.split('::') if m else []
        deps = {key(x.group(1)) for x in re.finditer(r'crate::((?:\w+::)*\w+)', text)}
        for x in re.finditer(r'\bsuper::((?:\w+::)*\w+)', text):
            deps.add(key('::'.join(base[:-1] + x.group(1).split('::'))))
        for sib in mods:
            sp = sib.split('::')
            if len(sp) == len(base) and sp[:-1] == base[:-1] and sp != base:
                if re.search(r'(?<![\w:])' + sp[-1] + r'::', text) or \
                        re.search(r'super::\{[^}]*\b' + sp[-1] + r'\b', text):
                    deps.add(key(sib))
        graph.setdefault(me, set()).update(d for d in deps if d and d != me)
    # A module's own children are its business, not a circle.
    for m in graph:
        graph[m] = {d for d in graph[m] if not d.startswith(m + '::') and not (m and m.startswith(d + '::'))}
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
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
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def members(root):
    """The workspace's crates that have a src/ folder, as Cargo.toml lists them."""
    text = open(os.path.join(root, 'Cargo.toml')).read()
    listed = re.search(r'members\s*=\s*\[([^\]]*)\]', text).group(1)
    names = re.findall(r'"([^"]+)"', listed)
    return [m for m in names if os.path.isdir(os.path.join(root, m, 'src'))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('crates', nargs='*', default=None)
    ap.add_argument('--max-fn', type=int, default=150)
    ap.add_argument('--max-file', type=int, default=1000)
    a = ap.parse_args()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
    if not a.crates:
        a.crates = members(root)
    bad = 0
    for c in a.crates:
        src = os.path.join(root, c, 'src')
        for p in sources(src):
            rel = os.path.relpath(p, root)
            n = open(p, errors='replace').read().count('\n')
            if n > a.max_file:
                print(f'{rel}: {n} lines (over {a.max_file})')
                bad += 1
            for length, line, name in long_functions(p, a.max_fn):
                print(f'{rel}:{line}: fn {name} is {length} lines (over {a.max_fn})')
                bad += 1
        seen = set()
        for d in (1, 2, 3):
            for comp in circles(src, d):
                t = tuple(comp)
                if t not in seen:
                    seen.add(t)
                    print(f'{c}: import circle: {" -> ".join(comp)}')
                    bad += 1
    print(f'{bad} problem(s) in {", ".join(a.crates)}')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
