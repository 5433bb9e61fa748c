#!/usr/bin/env python3
"""Render an Envoy config template: replaces ${NAME} with values.

Usage: render.py [--env-file FILE] TEMPLATE > envoy.yaml

Values come from the environment, or from an env file of literal KEY=VALUE
lines (no shell quoting; `#` starts a comment line). Every ${NAME} in the
template must be set; a missing one is an error naming it.

A line holding only `@include(FILE)` is replaced by FILE (relative to this
script's directory), each line indented like the directive and not
substituted: the Lua hold filters live in envoy/*.lua and are inlined here.

KEYHOLE_TAXONOMY, when set and not empty, names the alias taxonomy file (JSON)
that control reads too (`keyhole serve --taxonomy FILE`, or the same variable):
its object becomes the `taxonomy` member of LLM_FILTER_CONFIG and
HMS_FILTER_CONFIG, so the filter and control run one taxonomy from one file.
A filter configuration that already has a `taxonomy` is an error (two sources
would drift); one that gets the file is written back as compact JSON. In both
configurations `'` is doubled: the template holds them in single-quoted YAML
scalars.
"""
import json
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

FILTER_CONFIGS = ("LLM_FILTER_CONFIG", "HMS_FILTER_CONFIG")
taxonomy_file = values.get("KEYHOLE_TAXONOMY", "").strip()
if taxonomy_file:
    try:
        with open(taxonomy_file, encoding="utf-8") as f:
            taxonomy = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"render.py: KEYHOLE_TAXONOMY={taxonomy_file}: {e}")
    if not isinstance(taxonomy, dict):
        sys.exit(f"render.py: KEYHOLE_TAXONOMY={taxonomy_file}: must hold a JSON object")
    for name in FILTER_CONFIGS:
        if not values.get(name, "").strip():
            continue
        try:
            config = json.loads(values[name])
        except ValueError as e:
            sys.exit(f"render.py: {name}: not JSON: {e}")
        if not isinstance(config, dict):
            sys.exit(f"render.py: {name}: must be a JSON object")
        if "taxonomy" in config:
            sys.exit(f"render.py: {name} has a taxonomy and KEYHOLE_TAXONOMY is set: give it in one place")
        config["taxonomy"] = taxonomy
        values[name] = json.dumps(config, separators=(",", ":"))
for name in FILTER_CONFIGS:
    if name in values:
        values[name] = values[name].replace("'", "''")
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
