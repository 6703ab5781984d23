#!/usr/bin/env python3
"""Checks that no function in userspace/ is over 150 lines and no file over 900 (issue 39).

Reports every function of userspace/**/*.cc|.h longer than --max-function lines and every file
longer than --max-file lines. Fails (exit 1) on each one the exceptions file does not name, or
that is longer than the size it names there, and on each exception that no longer matches
anything over the limit (an exception that outlives its reason would let the code grow back).

The exceptions file (tools/size-exceptions.txt) has one entry a line:

    path[:function] max_lines  # why

path is relative to the repository; without a function the entry is for the file's length.
A function is named as its definition spells it (`validate`, `RouteStage::route`), prefixed with
its class when it is defined in the class body (`Foo::bar`).

The sources are clang-formatted, and the checker relies on it instead of parsing C++: a
function body is the block opened by a line ending in `{` at namespace or class scope whose
statement has a parameter list and no initializer; it runs from the first line of that
statement (the signature) to the line of the matching `}`. Lambdas and local classes count
toward the function they are in.
"""

import argparse
import pathlib
import re
import sys

SOURCE_SUFFIXES = (".cc", ".h")


def code_lines(text):
    """The text's lines with comments removed and string and character literals emptied, so
    that every brace left is one of the code's. Keeps the line count."""
    out = []
    cur = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            out.append("".join(cur))
            cur = []
            i += 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.extend([""] * text.count("\n", i, end))
            i = end
        elif c == '"':
            prefix = re.search(r"(?:u8|u|U|L)?R$", "".join(cur))
            if prefix and text[i + 1 : i + 2] != '"' and "(" in text[i:]:
                # A raw string: R"delim( ... )delim", possibly over many lines.
                open_paren = text.index("(", i)
                delim = text[i + 1 : open_paren]
                end = text.find(")" + delim + '"', open_paren)
                end = n if end < 0 else end + len(delim) + 2
                newlines = text.count("\n", i, end)
                cur.append('""')
                if newlines:
                    out.append("".join(cur))
                    out.extend([""] * (newlines - 1))
                    cur = []
                i = end
            else:
                i += 1
                while i < n and text[i] != '"' and text[i] != "\n":
                    i += 2 if text[i] == "\\" else 1
                cur.append('""')
                i += 1
        elif c == "'":
            # A digit separator (1'000'000) follows a number, a literal anything else.
            token = re.search(r"[A-Za-z0-9_.]*$", "".join(cur)).group(0)
            if token[:1].isdigit():
                cur.append(c)
                i += 1
                continue
            i += 1
            while i < n and text[i] != "'" and text[i] != "\n":
                i += 2 if text[i] == "\\" else 1
            cur.append("''")
            i += 1
        else:
            cur.append(c)
            i += 1
    out.append("".join(cur))
    return out


def without_brace_contents(s):
    """s with the contents of its balanced {...} dropped (member initializers `a_{x}`)."""
    prev = None
    while prev != s:
        prev = s
        s = re.sub(r"\{[^{}]*\}", "", s)
    return s


ATTRIBUTES = re.compile(r"alignas\s*\([^)]*\)|__attribute__\s*\(\(.*?\)\)|\[\[.*?\]\]")


def block_kind(statement):
    """What the `{` ending `statement` (code at namespace or class scope) opens: 'namespace',
    'class', 'function' or 'other' (an enum, an initializer, ...)."""
    s = without_brace_contents(" ".join(statement.split()))
    s = re.sub(r"^template\s*<.*?>\s*(?=[A-Za-z_])", "", s)
    if re.match(r"^(inline\s+)?namespace\b", s) or re.match(r'^extern\s*""$', s):
        return "namespace"
    if re.match(r"^(class|struct|union)\b", s) and "(" not in ATTRIBUTES.sub("", s):
        return "class"
    if re.match(r"^enum\b", s):
        return "other"
    head = s.split("(", 1)[0]
    if "(" in s and "=" not in re.sub(r"operator\s*\S+", "", head):
        return "function"
    return "other"


def function_name(statement, enclosing_class):
    """The name of the function whose signature is `statement`: the (qualified) name before its
    parameter list, prefixed with the class it is defined in."""
    s = without_brace_contents(" ".join(statement.split()))
    m = re.search(r"(operator\s*(\(\)|[^\s(]+)|[~A-Za-z_][\w:~<>,\s]*?)\s*\(", s)
    if not m:
        return "?"
    name = m.group(1).strip()
    # The last name of a qualified-id, with its qualifiers: drop the return type before it.
    name = re.split(r"\s(?=[~A-Za-z_][\w:~]*$)", name)[-1] if " " in name else name
    name = name.split()[-1] if not name.startswith("operator") else name
    return f"{enclosing_class}::{name}" if enclosing_class else name


def class_name(statement):
    s = ATTRIBUTES.sub("", without_brace_contents(" ".join(statement.split())))
    s = re.sub(r"^template\s*<.*?>\s*", "", s)
    m = re.match(r"^(?:class|struct|union)\s+(?:final\s+)?([A-Za-z_]\w*)", s)
    return m.group(1) if m else ""


def in_initializer_list(text):
    """Whether `text`, a statement up to a brace, is a constructor up to a member initializer's
    brace (`Foo::Foo(int a) : a_{`, the brace after a name), not up to its body."""
    s = without_brace_contents(" ".join(text.split()))
    prev = None
    while prev != s:
        prev = s
        s = re.sub(r"\([^()]*\)", "@", s)
    after_parameters = re.search(r"@[\w\s]*(?<!:):(?!:)", s) is not None
    return after_parameters and re.search(r"[\w>]$", s.rstrip()) is not None


def functions(lines):
    """(name, first line, length) of each function defined in `lines` (from code_lines)."""
    found = []
    # One entry per open brace: (kind, name, first line of its statement).
    stack = []
    statement = []  # the code of the statement in progress at this scope, by line
    statement_start = None
    depth = 0  # of the braces within the statement (an initializer, a one-line body)
    opened = ""  # what the first of those braces opened
    continuation = False  # inside a preprocessor line that goes on
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if continuation or stripped.startswith("#"):
            continuation = stripped.endswith("\\")
            continue
        if any(kind in ("function", "other") for kind, _, _ in stack):
            for c in line:
                if c == "{":
                    stack.append(("other", "", None))
                elif c == "}":
                    kind, name, start = stack.pop()
                    if kind == "function":
                        found.append((name, start, number - start + 1))
            continue
        if re.fullmatch(r"(public|protected|private)\s*:", stripped):
            continue
        # At namespace or class scope: follow the statement until it ends or opens a block.
        segment = 0  # where the statement in progress starts on this line
        ends = False
        for pos, c in enumerate(line):
            if not c.isspace() and statement_start is None:
                statement_start = number
            if c == "{":
                text = " ".join(statement + [line[segment:pos]])
                if depth == 0 and line[pos + 1 :].strip() == "":
                    kind = block_kind(text)
                    if kind == "function" and in_initializer_list(text):
                        depth += 1
                        opened = "other"
                        continue
                    enclosing = next((n for k, n, _ in reversed(stack) if k == "class"), "")
                    name = (
                        function_name(text, enclosing)
                        if kind == "function"
                        else class_name(text) if kind == "class" else ""
                    )
                    stack.append((kind, name, statement_start))
                    statement, statement_start = [], None
                    break
                if depth == 0:
                    opened = "other" if in_initializer_list(text) else block_kind(text)
                depth += 1
            elif c == "}":
                if depth > 0:
                    depth -= 1
                    # A body on one line ends its statement; an initializer goes on to its `;`.
                    ends = depth == 0 and opened in ("function", "class", "namespace")
                else:
                    # The end of the namespace or class we are in.
                    if stack:
                        stack.pop()
                    ends = True
            elif c == ";" and depth == 0:
                ends = True
            if ends:
                statement, statement_start, segment, ends = [], None, pos + 1, False
        else:
            if statement_start is not None:
                statement.append(line[segment:])
    return found


def measure(root, max_function, max_file):
    """(key, where, size, limit) of everything over its limit under root/userspace."""
    over = []
    for path in sorted((root / "userspace").rglob("*")):
        if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8", errors="replace")
        lines = code_lines(text)
        length = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if length > max_file:
            over.append((rel, f"{rel}:1 (file)", length, max_file))
        for name, start, size in functions(lines):
            if size > max_function:
                over.append((f"{rel}:{name}", f"{rel}:{start} {name}", size, max_function))
    return over


def read_exceptions(path):
    exceptions = {}
    errors = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        entry = raw.split("#", 1)[0].strip()
        if not entry:
            continue
        parts = entry.split()
        if len(parts) != 2 or not parts[1].isdigit():
            errors.append(f"{path}:{number}: expected 'path[:function] max_lines  # why'")
            continue
        if "#" not in raw:
            errors.append(f"{path}:{number}: say why {parts[0]} is excepted (# why)")
        exceptions[parts[0]] = int(parts[1])
    return exceptions, errors


def main():
    here = pathlib.Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=pathlib.Path, default=here.parent, help="the repository")
    parser.add_argument(
        "--exceptions", type=pathlib.Path, default=here / "size-exceptions.txt"
    )
    parser.add_argument("--max-function", type=int, default=150)
    parser.add_argument("--max-file", type=int, default=900)
    args = parser.parse_args()

    exceptions, failures = read_exceptions(args.exceptions)
    used = set()
    for key, where, size, limit in measure(args.root, args.max_function, args.max_file):
        allowed = exceptions.get(key)
        if allowed is None:
            failures.append(f"{where}: {size} lines, over the limit of {limit}")
        elif size > allowed:
            failures.append(f"{where}: {size} lines, over its exception of {allowed}")
        else:
            print(f"excepted: {where}: {size} lines (exception: {allowed})")
        used.add(key)
    for key in sorted(exceptions.keys() - used):
        failures.append(
            f"{args.exceptions.name}: {key} is no longer over the limit; remove its exception"
        )
    for failure in failures:
        print(failure)
    if failures:
        print(
            f"{len(failures)} problem(s): split what is too long "
            f"(functions up to {args.max_function} lines, files up to {args.max_file})"
        )
        return 1
    print("sizes ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
