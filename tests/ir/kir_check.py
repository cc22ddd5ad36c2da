#!/usr/bin/env python3
"""A small lit/FileCheck-style runner for the text-IR tests in tests/ir/*.kir.

Directives (in // comments of the .kir file):
  RUN: <command>       runs the command (must exit 0); its stdout is checked
  RUN-FAIL: <command>  runs the command (must exit non-zero); stdout+stderr are checked
  CHECK: text          the next match of text, after the previous match
  CHECK-NEXT: text     text on the line right after the previous match
  CHECK-NOT: text      text must not appear between the previous match and the next one (or the end)
  CHECK-XML-SVG: path  the file parses as XML and its root element is <svg>
Substitutions: %s (this file), %t (a temp path prefix), %kiln-opt, %kiln.
usage: kir_check.py FILE.kir --kiln-opt PATH --kiln PATH
"""
import argparse, os, shlex, subprocess, sys, tempfile
import xml.etree.ElementTree as ET


def fail(path, lineno, msg, output=None):
    print(f"{path}:{lineno}: error: {msg}", file=sys.stderr)
    if output is not None:
        print("---- output ----\n" + output + "----------------", file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--kiln-opt", required=True)
    ap.add_argument("--kiln", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kir_") as tmp:
        check(a, tmp)


def check(a, tmp):
    subs = {"%kiln-opt": a.kiln_opt, "%kiln": a.kiln, "%s": a.file, "%t": os.path.join(tmp, "t")}

    def subst(text):
        for k in sorted(subs, key=len, reverse=True):
            text = text.replace(k, subs[k])
        return text

    lines = open(a.file).read().splitlines()
    directives = []
    for i, line in enumerate(lines, 1):
        s = line.strip()
        if not s.startswith("//"):
            continue
        body = s[2:].strip()
        for kind in ("RUN-FAIL:", "RUN:", "CHECK-NEXT:", "CHECK-NOT:", "CHECK-XML-SVG:", "CHECK:"):
            if body.startswith(kind):
                directives.append((i, kind[:-1], body[len(kind):].strip()))
                break
    if not any(k in ("RUN", "RUN-FAIL") for _, k, _ in directives):
        fail(a.file, 1, "no RUN line")
    if not any(k.startswith("CHECK") for _, k, _ in directives):
        fail(a.file, 1, "no CHECK line: a test must check something")

    output, out_lines, pos, pending_not = "", [], 0, []
    for lineno, kind, arg in directives:
        if kind in ("RUN", "RUN-FAIL"):
            cmd = subst(arg)
            p = subprocess.run(shlex.split(cmd), capture_output=True, text=True)
            if kind == "RUN" and p.returncode != 0:
                fail(a.file, lineno, f"command failed ({p.returncode}): {cmd}", p.stdout + p.stderr)
            if kind == "RUN-FAIL" and p.returncode == 0:
                fail(a.file, lineno, f"command succeeded but should fail: {cmd}", p.stdout + p.stderr)
            output = p.stdout if kind == "RUN" else p.stdout + p.stderr
            out_lines, pos, pending_not = output.splitlines(), 0, []
        elif kind == "CHECK-NOT":
            pending_not.append((lineno, arg))
        elif kind == "CHECK":
            found = next((j for j in range(pos, len(out_lines)) if arg in out_lines[j]), None)
            if found is None:
                fail(a.file, lineno, f"CHECK: '{arg}' not found after output line {pos}", output)
            for nl, na in pending_not:
                if any(na in out_lines[j] for j in range(pos, found)):
                    fail(a.file, nl, f"CHECK-NOT: '{na}' found", output)
            pending_not, pos = [], found + 1
        elif kind == "CHECK-NEXT":
            if pos >= len(out_lines) or arg not in out_lines[pos]:
                fail(a.file, lineno, f"CHECK-NEXT: '{arg}' not on output line {pos + 1}", output)
            pos += 1
        elif kind == "CHECK-XML-SVG":
            path = subst(arg)
            try:
                root = ET.parse(path).getroot()
            except (OSError, ET.ParseError) as e:
                fail(a.file, lineno, f"{path} is not readable XML: {e}")
            if not root.tag.endswith("svg"):
                fail(a.file, lineno, f"{path}: root element is <{root.tag}>, not <svg>")
    for nl, na in pending_not:
        if any(na in out_lines[j] for j in range(pos, len(out_lines))):
            fail(a.file, nl, f"CHECK-NOT: '{na}' found", output)
    print(f"PASS {a.file}")


if __name__ == "__main__":
    main()
