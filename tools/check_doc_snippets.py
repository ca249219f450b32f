#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compiles every ```cpp block of README.md and docs/*.md, so the docs cannot drift from the code.

A block is compiled as written when it has a main(). Otherwise its leading declarations
(#include, #define, using namespace, struct, class, template, CAIRN_TREE, namespace) stay at namespace
scope and the rest becomes the body of a function. A comment right before the block may give
what the fragment assumes, never shown to readers:

    <!-- snippet context="mylib" setup="TrainState state, target;" -->

context names tests/doc_snippets/<name>.hpp, included first; setup is code placed at the top of
the function body (write a double quote as &quot;); alone="1" leaves out the cairn/cairn.hpp that
is otherwise included first (a block that must compile with the headers it names, such as a
model header with cairn/tree.hpp); define="NAME" compiles the block with -DNAME. Errors point at the markdown file and line (#line).

A block the checker puts cairn/cairn.hpp before (every block but alone="1" ones, which are
compiled exactly as written) is compiled with CAIRN_SEPARATE_COMPILATION: the block's own code,
and every template of cairn it instantiates, is checked as before, while the runtime's
definitions (compiled and tested by the builds of src/) are left out. With the precompiled
header that takes a block from about 9 s to about 1 s: a header-only cairn/cairn.hpp leaves g++
the runtime's pending template instantiations to do again in every file, PCH or not. Usage:
    tools/check_doc_snippets.py [--jobs N] [files...]
"""
import argparse
import concurrent.futures
import html
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIRECTIVE = re.compile(r'<!--\s*snippet\b(.*?)-->', re.S)
ATTR = re.compile(r'(\w+)="([^"]*)"')
TOP_LEVEL = re.compile(r'^(#include|#define|using namespace|struct\b|class\b|template\b|CAIRN_TREE|namespace\b)')


def blocks(path):
    """Yields (first line number, code, attributes) for each ```cpp block."""
    lines = open(path, encoding='utf-8').read().split('\n')
    i = 0
    while i < len(lines):
        if lines[i].strip() == '```cpp':
            attrs = {}
            j = i - 1
            while j >= 0 and not lines[j].strip():
                j -= 1
            # The directive may span lines; look back to its opening.
            k = j
            while k >= 0 and '<!--' not in lines[k]:
                k -= 1
            if j >= 0 and lines[j].rstrip().endswith('-->') and k >= 0:
                m = DIRECTIVE.search('\n'.join(lines[k:j + 1]))
                if m:
                    attrs = {k: html.unescape(v) for k, v in ATTR.findall(m.group(1))}
            end = i + 1
            while end < len(lines) and lines[end].strip() != '```':
                end += 1
            yield i + 2, '\n'.join(lines[i + 1:end]), attrs
            i = end
        i += 1


def split(code):
    """Leading namespace-scope declarations, and the statements after them."""
    lines = code.split('\n')
    depth = 0
    for n, line in enumerate(lines):
        stripped = line.strip()
        if depth == 0 and stripped and not stripped.startswith('//') and not TOP_LEVEL.match(stripped):
            return lines[:n], lines[n:], n
        depth += line.count('{') - line.count('}')
    return lines, [], len(lines)


def uses_pch(code, attrs):
    """Whether the block is compiled with the precompiled cairn/cairn.hpp: it includes it first
    and is compiled with the flags the header was precompiled with (no -D, no MPI flags)."""
    return attrs.get('alone') != '1' and 'define' not in attrs and not needs_mpi(code, attrs)


def needs_mpi(code, attrs):
    return 'cairn/mpi.hpp' in code or attrs.get('context') == 'mpi'


def translation_unit(path, first_line, code, attrs):
    rel = os.path.relpath(path, ROOT)
    # "cairn_pch.hpp" includes cairn/cairn.hpp; g++ takes cairn_pch.hpp.gch beside it instead
    # where one was made (main), and the header itself where it is not valid for this compile.
    first = '#include "cairn_pch.hpp"' if uses_pch(code, attrs) else '#include <cairn/cairn.hpp>'
    out = [] if attrs.get('alone') == '1' else [first]
    if 'context' in attrs:
        out.append('#include "%s.hpp"' % attrs['context'])
    if re.search(r'\bint\s+main\s*\(', code):
        out += ['#line %d "%s"' % (first_line, rel), code]
        return '\n'.join(out) + '\n'
    top, body, body_start = split(code)
    out += ['#line %d "%s"' % (first_line, rel)] + top
    out += ['void cairn_doc_snippet() {', attrs.get('setup', '')]
    out += ['#line %d "%s"' % (first_line + body_start, rel)] + body
    out += ['}', 'int main() {}']
    return '\n'.join(out) + '\n'


def mpi_flags():
    """The compile flags of the MPI that pkg-config knows ('mpi': MPICH or Open MPI on Debian)."""
    r = subprocess.run(['pkg-config', '--cflags', 'mpi'], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit('MPI blocks need an MPI with pkg-config (Debian: apt-get install libmpich-dev)')
    return r.stdout.split()


# The blocks' mode (see the docstring); the precompiled header is made with it too.
SEPARATE = '-DCAIRN_SEPARATE_COMPILATION'


def base_flags(workdir):
    return ['-std=c++20', SEPARATE, '-I' + workdir, '-I' + os.path.join(ROOT, 'include'), '-I/usr/include/eigen3',
            '-I' + os.path.join(ROOT, 'tests', 'doc_snippets')]


def precompile(workdir):
    """cairn/cairn.hpp precompiled once for the blocks that include it first: parsing it was
    half of each block's compile (9.4 s -> 4.8 s a block on the 2-core CI machine). Only g++
    (clang's precompiled headers are another format and option); where it fails, every block
    reads the header itself, as before."""
    with open(os.path.join(workdir, 'cairn_pch.hpp'), 'w') as f:
        f.write('#include <cairn/cairn.hpp>\n')
    cxx = os.environ.get('CXX', 'g++')
    if 'clang' in os.path.basename(cxx):
        return False
    r = subprocess.run([cxx] + base_flags(workdir) + ['-x', 'c++-header', os.path.join(workdir, 'cairn_pch.hpp'),
                        '-o', os.path.join(workdir, 'cairn_pch.hpp.gch')], capture_output=True, text=True)
    return r.returncode == 0


def compile_one(job):
    path, first_line, code, attrs, workdir, index = job
    src = os.path.join(workdir, 'snippet%d.cpp' % index)
    with open(src, 'w') as f:
        f.write(translation_unit(path, first_line, code, attrs))
    cxx = os.environ.get('CXX', 'g++')
    cmd = [cxx] + base_flags(workdir) + ['-fsyntax-only', src]
    if attrs.get('alone') == '1':
        cmd.remove(SEPARATE)  # as written: a block that wants separate compilation says so
    if needs_mpi(code, attrs):
        cmd[1:1] = mpi_flags()
    if 'define' in attrs:
        cmd[1:1] = ['-D' + attrs['define']]
    r = subprocess.run(cmd, capture_output=True, text=True)
    return path, first_line, r.returncode, r.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--jobs', type=int, default=os.cpu_count() or 2)
    ap.add_argument('files', nargs='*')
    args = ap.parse_args()
    files = args.files or [os.path.join(ROOT, 'README.md')] + sorted(
        os.path.join(ROOT, 'docs', f) for f in os.listdir(os.path.join(ROOT, 'docs')) if f.endswith('.md'))
    with tempfile.TemporaryDirectory() as workdir:
        precompile(workdir)
        jobs = []
        for path in files:
            for first_line, code, attrs in blocks(path):
                jobs.append((path, first_line, code, attrs, workdir, len(jobs)))
        failed = 0
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            for path, line, rc, err in pool.map(compile_one, jobs):
                where = '%s:%d' % (os.path.relpath(path, ROOT), line)
                if rc == 0:
                    print('ok      ' + where)
                else:
                    failed += 1
                    print('FAILED  ' + where)
                    print('\n'.join(err.split('\n')[:40]))
        print('%d passed, %d failed' % (len(jobs) - failed, failed))
        return 1 if failed or not jobs else 0


if __name__ == '__main__':
    sys.exit(main())
