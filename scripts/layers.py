#!/usr/bin/env python3
"""ax's parts and their arrows, from the build's own description of its targets.

CMake writes BUILD/ax-parts.json at configure time (cmake/AxTargets.cmake, ax_export_parts): every
target of ax's folders with its sources, its public include folder and the ax targets it links.
Those links are the allowed arrows, written once, in each part's CMakeLists.txt. This script

  check   fails on an #include that runs up the layers: a file of part P that includes a header of
          part Q when P does not link Q (directly or through the parts it links), a header reached
          by a relative path into another part's folder, or a cycle among the parts;
  graph   prints the picture of the parts and their arrows for docs/architecture.md, or with
          --check compares it with the block between the markers there (a test does: the picture
          cannot drift from the targets).

  scripts/layers.py check --parts build/cpu/ax-parts.json [--root DIR]
  scripts/layers.py graph --parts build/cpu/ax-parts.json [--check docs/architecture.md | --write docs/architecture.md]

Tests and benchmarks are not parts: they include whatever they link (and private headers their
CMakeLists.txt names), so they are not checked.
"""

import argparse
import json
import os
import re
import subprocess
import sys

BEGIN = "<!-- parts:begin (scripts/layers.py graph --write docs/architecture.md) -->"
END = "<!-- parts:end -->"
SOURCE_SUFFIXES = (".cc", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


class Parts:
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            entries = json.load(f)
        self.by_name = {e["name"]: e for e in entries}
        self.folder = {}   # part -> folder it owns (libraries), "" for executables
        for e in entries:
            folder = ""
            if e["include"]:
                folder = os.path.dirname(e["include"])
            elif e["type"] == "STATIC_LIBRARY" and e["sources"]:
                folder = os.path.commonpath([os.path.dirname(s) for s in e["sources"]])
                if os.path.basename(folder) == "src":
                    folder = os.path.dirname(folder)
            self.folder[e["name"]] = folder
        self.source_owner = {}
        for e in entries:
            for s in e["sources"]:
                # A file in two targets' sources (none today) belongs to the library.
                if s not in self.source_owner or e["type"] == "STATIC_LIBRARY":
                    self.source_owner[s] = e["name"]

    def links(self, name):
        return self.by_name[name]["links"]

    def reachable(self, name):
        seen, todo = set(), [name]
        while todo:
            for d in self.links(todo.pop()):
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        return seen

    def owner(self, path):
        """The part a repository file belongs to: its target's sources, else the deepest part
        folder holding it; None outside every part (tests, bench, scripts)."""
        if path in self.source_owner:
            return self.source_owner[path]
        best = None
        for name, folder in self.folder.items():
            if folder and (path + "/").startswith(folder + "/"):
                if best is None or len(folder) > len(self.folder[best]):
                    best = name
        return best

    def header_owner(self, root, include):
        """(part, path) of a header named "ax/..." in some part's public include folder."""
        for name, e in self.by_name.items():
            if e["include"] and os.path.isfile(os.path.join(root, e["include"], include)):
                return name, os.path.join(e["include"], include)
        # A header the build generates (ax/common/build_config.h): the part whose include
        # folder holds the header's folder.
        for name, e in self.by_name.items():
            if e["include"] and os.path.isdir(os.path.join(root, e["include"],
                                                           os.path.dirname(include))):
                return name, None
        return None, None

    def cycles(self):
        state, out = {}, []

        def visit(n, stack):
            state[n] = 1
            for d in self.links(n):
                if state.get(d) == 1:
                    out.append(stack[stack.index(d):] + [d] if d in stack else [n, d])
                elif d not in state:
                    visit(d, stack + [d])
            state[n] = 2

        for n in sorted(self.by_name):
            if n not in state:
                visit(n, [n])
        return out


def tracked_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-co", "--exclude-standard"],
                             capture_output=True, text=True, check=True).stdout.split("\n")
        return sorted(f for f in out if f.endswith(SOURCE_SUFFIXES))
    except (OSError, subprocess.CalledProcessError):
        found = []
        for d, _, names in os.walk(root):
            if "/build" in d or "/.git" in d:
                continue
            found += [os.path.relpath(os.path.join(d, n), root) for n in names
                      if n.endswith(SOURCE_SUFFIXES)]
        return sorted(found)


def check(parts, root):
    problems = []
    for c in parts.cycles():
        problems.append("the parts link in a cycle: " + " -> ".join(c))
    for path in tracked_files(root):
        if path.startswith(("tests/", "bench/")):
            continue
        part = parts.owner(path)
        if part is None:
            continue
        allowed = parts.reachable(part) | {part}
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                inc = m.group(1)
                if inc.startswith("ax/"):
                    owner, _ = parts.header_owner(root, inc)
                    if owner is None:
                        problems.append(f"{path}:{lineno}: includes {inc}, which no part's "
                                        "include/ folder holds")
                    elif owner not in allowed:
                        problems.append(
                            f"{path}:{lineno}: includes {inc} of {owner}, but {part} does not link "
                            f"{owner}: an include up the layers (the arrows are the DEPS of "
                            f"{part} in {parts.by_name[part]['folder'] or '.'}/CMakeLists.txt; "
                            "docs/architecture.md \"Parts and layers\")")
                elif "/" in inc:
                    target = os.path.normpath(os.path.join(os.path.dirname(path), inc))
                    if os.path.isfile(os.path.join(root, target)):
                        other = parts.owner(target)
                        if other is not None and other != part and \
                                parts.folder.get(other) != parts.folder.get(part):
                            problems.append(f"{path}:{lineno}: includes {inc}, a private header "
                                            f"of {other}, by a relative path")
    return problems


def node(name):
    return name.replace("-", "_")


def graph(parts):
    """The picture: a Mermaid flowchart (GitHub draws it) of the libraries and the programs,
    arrows for direct links only, and the same as a table."""
    libs = sorted(n for n, e in parts.by_name.items() if e["type"] != "EXECUTABLE"
                  and e["type"] != "MODULE_LIBRARY")
    progs = sorted(n for n in parts.by_name if n not in libs)
    lines = [BEGIN, "", "```mermaid", "flowchart BT"]
    for n in libs + progs:
        e = parts.by_name[n]
        label = parts.folder[n] or (os.path.dirname(e["sources"][0]) if e["sources"] else
                                    e["folder"])
        shape = ('(["', '"])') if n in progs else ('["', '"]')
        lines.append(f"  {node(n)}{shape[0]}{n}<br/>{label}{shape[1]}")
    for n in libs + progs:
        for d in sorted(parts.links(n)):
            lines.append(f"  {node(n)} --> {node(d)}")
    lines += ["```", "", "| part | folder | links (its allowed arrows) |", "|---|---|---|"]
    for n in libs + progs:
        e = parts.by_name[n]
        folder = parts.folder[n] or ", ".join(e["sources"]) or e["folder"]
        links = ", ".join(f"`{d}`" for d in sorted(parts.links(n))) or "—"
        lines.append(f"| `{n}` | `{folder}` | {links} |")
    lines += ["", END]
    return "\n".join(lines) + "\n"


def block_of(text):
    a, b = text.find(BEGIN), text.find(END)
    if a < 0 or b < 0:
        return None, a, b
    return text[a:b + len(END)] + "\n", a, b + len(END) + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["check", "graph"])
    ap.add_argument("--parts", required=True, help="BUILD/ax-parts.json, written by CMake")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help="the tree to check (default: this checkout)")
    ap.add_argument("--check", metavar="MD", help="graph: compare with the block in MD")
    ap.add_argument("--write", metavar="MD", help="graph: replace the block in MD")
    a = ap.parse_args()
    if not os.path.isfile(a.parts):
        print(f"layers.py: {a.parts} not found: configure a build first (cmake --preset cpu)",
              file=sys.stderr)
        return 2
    parts = Parts(a.parts)
    if a.mode == "check":
        problems = check(parts, a.root)
        for p in problems:
            print(p)
        if problems:
            print(f"layers: {len(problems)} include(s) against the layers", file=sys.stderr)
            return 1
        print(f"layers: every include of {len(parts.by_name)} parts follows their links")
        return 0
    picture = graph(parts)
    target = a.check or a.write
    if not target:
        sys.stdout.write(picture)
        return 0
    with open(target, encoding="utf-8") as f:
        text = f.read()
    old, start, end = block_of(text)
    if old is None:
        print(f"layers.py: {target} has no '{BEGIN}' ... '{END}' block", file=sys.stderr)
        return 2
    if a.write:
        with open(target, "w", encoding="utf-8") as f:
            f.write(text[:start] + picture + text[end:])
        return 0
    if old != picture:
        import difflib
        sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), picture.splitlines(True),
                                                   target, "from the CMake targets"))
        print(f"layers: the picture in {target} differs from the targets: "
              f"scripts/layers.py graph --parts {a.parts} --write {target}", file=sys.stderr)
        return 1
    print(f"layers: the picture in {target} matches the targets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
