#!/usr/bin/env python3
"""Render an Envoy config template: replaces ${NAME} with values.

Usage: render.py [--env-file FILE] TEMPLATE > envoy.yaml

Values come from the environment, or from an env file of literal KEY=VALUE
lines (no shell quoting; `#` starts a comment line). Every ${NAME} in the
template must be set; a missing one is an error naming it.
"""
import os
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
    sys.stdout.write(template.substitute(values))
except KeyError as e:
    sys.exit(f"render.py: {args[0]}: variable {e.args[0]} is not set")
