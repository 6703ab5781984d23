#!/usr/bin/env python3
"""The man pages cover what they document (ctest: appliance_man_keys, appliance_man_commands).

  man_coverage.py keys REFERENCE_YAML PAGE       every key path of configs/reference.yaml has
                                                 an entry in vecflow.yaml(5)
  man_coverage.py commands VECFLOWCTL PAGE[.gz]  every subcommand vecflowctl's CLI11 help lists
                                                 (recursively) has a section in vecflowctl(1)

Key paths are written as in vecflow.yaml(5): `ports[].queues`, a list item as `[]`, and a
pipeline stage's own keys as `pipeline[TYPE].key` (its common keys stage, name, sched and
fuse as `pipeline[].key`); the top-level sections are the page's headings. Exits 1 naming
every missing one.
"""
import gzip
import re
import subprocess
import sys

import yaml

COMMON_STAGE_KEYS = {"stage", "name", "sched", "fuse"}


def key_paths(node, prefix=""):
    """Every key path of a YAML document, parents included."""
    paths = []
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            paths.append(path)
            paths += key_paths(value, path)
    elif isinstance(node, list):
        for item in node:
            if prefix == "pipeline" and isinstance(item, dict) and "stage" in item:
                for key, value in item.items():
                    at = "pipeline[]" if key in COMMON_STAGE_KEYS else f"pipeline[{item['stage']}]"
                    paths.append(f"{at}.{key}")
                    paths += key_paths(value, f"{at}.{key}")
            else:
                paths += key_paths(item, prefix + "[]")
    return paths


def page_text(path):
    """The page's text with troff's escapes for - and zero-width characters undone."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read()
    return text.replace("\\-", "-").replace("\\&", "")


def check_keys(reference, page):
    with open(reference, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    # A key's entry is a tagged paragraph: `.TP` then `.B path`.
    tags = set(re.findall(r"^\.B (\S+)\s*$", page_text(page), re.M))
    # The sections themselves (appliance, cpu ...) are the page's headings, not entries.
    paths = [p for p in dict.fromkeys(key_paths(doc)) if "." in p]
    missing = [p for p in paths if p not in tags]
    for p in missing:
        print(f"FAIL: {reference}: key {p} has no entry (.B {p}) in {page}", file=sys.stderr)
    if missing:
        return 1
    print(f"ok: the {len(paths)} key paths of {reference} are in {page}")
    return 0


def subcommands(program, words=()):
    """Every subcommand path of a CLI11 program, from its own --help, recursively."""
    out = subprocess.run([program, *words, "--help"], capture_output=True, text=True, check=True)
    found, on = [], False
    for line in out.stdout.splitlines():
        if re.match(r"^[A-Za-z].*:\s*$", line):
            on = line.lower().startswith("subcommands")
            continue
        m = re.match(r"^  (\S+)", line)
        if on and m:
            path = (*words, m.group(1))
            found.append(path)
            found += subcommands(program, path)
    return found


def check_commands(program, page):
    text = page_text(page)
    paths = subcommands(program)
    if not paths:
        print(f"FAIL: {program} --help lists no subcommands", file=sys.stderr)
        return 1
    missing = [" ".join(p) for p in paths if f'.SS "{" ".join(p)}"' not in text]
    for p in missing:
        print(f'FAIL: vecflowctl {p} has no section (.SS "{p}") in {page}', file=sys.stderr)
    if missing:
        return 1
    print(f"ok: the {len(paths)} subcommands of {program} are in {page}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("keys", "commands"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    check = check_keys if sys.argv[1] == "keys" else check_commands
    sys.exit(check(sys.argv[2], sys.argv[3]))
