#!/usr/bin/env python3
"""Render an Envoy config template: replaces ${NAME} with environment values.

Usage: render.py TEMPLATE > envoy.yaml
Every ${NAME} in the template must be set; a missing one is an error naming it.
"""
import os
import string
import sys

if len(sys.argv) != 2:
    sys.exit("usage: render.py TEMPLATE")
with open(sys.argv[1], encoding="utf-8") as f:
    template = string.Template(f.read())
try:
    sys.stdout.write(template.substitute(os.environ))
except KeyError as e:
    sys.exit(f"render.py: {sys.argv[1]}: variable {e.args[0]} is not set")
