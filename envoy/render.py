#!/usr/bin/env python3
"""Render an Envoy config template: replaces ${NAME} with values.

Usage: render.py [--env-file FILE] TEMPLATE > envoy.yaml

Values come from the environment, or from an env file of literal KEY=VALUE
lines (no shell quoting; `#` starts a comment line). Every ${NAME} in the
template must be set; a missing one is an error naming it.

A line holding only `@include(FILE)` is replaced by FILE (relative to this
script's directory), each line indented like the directive and not
substituted: the Lua hold filters live in envoy/*.lua and are inlined here.
"""
import os
import re
import string
import sys

args = sys.argv[1:]
values = dict(os.environ)
if len(args) == 3 and args[0] == "--env-file":
    with open(args[1], encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.strip() and not line.lstrip().startswith("#"):
                key, _, value = line.partition("=")
                values[key.strip()] = value
    args = args[2:]
if len(args) != 1:
    sys.exit("usage: render.py [--env-file FILE] TEMPLATE")
with open(args[0], encoding="utf-8") as f:
    template = string.Template(f.read())
try:
    rendered = template.substitute(values)
except KeyError as e:
    sys.exit(f"render.py: {args[0]}: variable {e.args[0]} is not set")

INCLUDE = re.compile(r"^([ ]*)@include\(([\w.-]+)\)[ ]*$")
here = os.path.dirname(os.path.abspath(__file__))
out = []
for line in rendered.splitlines(keepends=True):
    m = INCLUDE.match(line.rstrip("\n"))
    if m is None:
        out.append(line)
        continue
    indent, name = m.groups()
    try:
        with open(os.path.join(here, name), encoding="utf-8") as f:
            included = f.read()
    except OSError as e:
        sys.exit(f"render.py: {args[0]}: @include({name}): {e.strerror}")
    for inc in included.splitlines():
        out.append(indent + inc + "\n" if inc.strip() else "\n")
sys.stdout.write("".join(out))
