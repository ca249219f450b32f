#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the "Every file" map of docs/internals.md from the first sentence of each file's
opening comment, so that the map lists every header of include/cairn and cli/ and cannot fall
behind the tree. --check (CI) fails when the map in the doc differs from what this writes.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, 'docs', 'internals.md')
BEGIN, END = '<!-- file-map:begin -->', '<!-- file-map:end -->'


def first_sentence(path):
    comment = []
    with open(path, encoding='utf-8') as f:
        lines = f.read().split('\n')
    for line in lines[1:]:  # after the SPDX line
        if not line.startswith('//'):
            break
        comment.append(line[2:].strip())
    text = ' '.join(c for c in comment if c)
    m = re.search(r'\.(\s|$)', text)
    sentence = text[:m.start() + 1] if m else text
    # A numbered list or a code example after a colon is the comment's body, not its summary.
    listed = re.search(r':\s+\d+\.', sentence)
    if listed:
        sentence = sentence[:listed.start()] + '.'
    elif len(sentence) > 300 and ': ' in sentence:
        sentence = sentence[:sentence.index(': ')] + '.'
    return sentence.replace('|', '\\|')


def table(folder, prefix):
    rows = []
    for dirpath, _, files in sorted(os.walk(folder)):
        for name in sorted(files):
            if not name.endswith(('.hpp', '.cpp')):
                continue
            path = os.path.join(dirpath, name)
            rows.append('| `%s%s` | %s |' % (prefix, os.path.relpath(path, folder), first_sentence(path)))
    return rows


def render():
    rows = ['| File | What it holds (its opening comment) |', '|---|---|']
    rows += table(os.path.join(ROOT, 'include', 'cairn'), 'cairn/')
    rows += table(os.path.join(ROOT, 'cli'), 'cli/')
    return '\n'.join(rows)


def main():
    with open(DOC, encoding='utf-8') as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        sys.exit('docs/internals.md has no %s ... %s section' % (BEGIN, END))
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = head + BEGIN + '\n' + render() + '\n' + END + tail
    if '--check' in sys.argv:
        if new != doc:
            sys.exit('docs/internals.md: the file map is out of date; run tools/file_map.py')
        return
    with open(DOC, 'w', encoding='utf-8') as f:
        f.write(new)


if __name__ == '__main__':
    main()
