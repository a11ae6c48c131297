#!/usr/bin/env python3
"""Writes each given kernel file without its schedules (every stage's
`schedule = [...]`, and the [tune] section the schedules used) and with
its kernel renamed NAME_default, into DIR: what rocmc's default schedules
are measured on (bench/gpu/variants/defaults)."""
import re, sys, os

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for path in sys.argv[2:]:
    src = open(path).read()
    # schedule = [ ... ] over one or several lines (no `]` inside steps).
    src = re.sub(r'(?m)^schedule\s*=\s*\[[^\]]*\]\s*\n', '', src)
    # The [tune] section and its tables, up to the next [[stage]] or [section].
    src = re.sub(r'(?ms)^\[tune(\.[a-z]+)?\]\n.*?(?=^\[)', '', src)
    name = re.search(r'(?m)^name\s*=\s*"([^"]+)"', src).group(1)
    src = re.sub(r'(?m)^name\s*=\s*"[^"]+"', f'name = "{name}_default"', src, count=1)
    head = f"# {os.path.basename(path)} with no schedule: rocmc's default schedules (scripts/strip-schedules.py).\n"
    open(os.path.join(out, f"{name}_default.toml"), "w").write(head + src)
