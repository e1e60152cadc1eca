"""Every relative link of README.md and docs/*.md resolves: to a file or folder, and its `#anchor` to a heading.

Both README.md and docs/README.md list every page of docs/.

Anchors follow GitHub's rule for a heading: its text as rendered (code spans and
links reduced to their text), lowercased, every character but letters, digits,
'-', '_' and spaces dropped, spaces turned to '-'; a heading whose anchor is
taken already gets '-1', '-2', ... in order. Links in fenced blocks and code
spans are text, not links, and are not checked.
"""

import glob
import os
import re
from typing import Dict, Iterator, List, Set, Tuple

from absl.testing import absltest

from tests import paths

PAGES = ["README.md"] + sorted(os.path.relpath(p, paths.REPO_ROOT)
                               for p in glob.glob(os.path.join(paths.REPO_ROOT, "docs", "*.md")))
# The documentation's own index, which lists every page as README.md does.
DOCS_INDEX = "docs/README.md"
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"`[^`]*`")
# [text](target) and ![alt](target); the text may hold a code span (stripped first) and wrap lines.
LINK = re.compile(r"!?\[([^\]]*)\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# Targets that leave the repository.
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)
# Characters GitHub drops from a heading's anchor: all but letters, digits, '_', '-' and spaces.
NOT_IN_ANCHOR = re.compile(r"[^\w\- ]", re.UNICODE)


def prose_lines(text: str) -> Iterator[Tuple[int, str]]:
    """Yields (line number, line) of `text` outside fenced blocks."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        match = FENCE.match(line)
        if match and fence is None:
            fence = match.group(1)
        elif match and match.group(1) == fence:
            fence = None
        elif fence is None:
            yield number, line


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading's markdown text."""
    text = heading.replace("`", "")
    text = LINK.sub(lambda m: m.group(1), text)
    return NOT_IN_ANCHOR.sub("", text.lower()).replace(" ", "-")


def anchors(path: str) -> Set[str]:
    """Every heading anchor of the markdown file at `path`, duplicates numbered as GitHub does."""
    with open(path) as f:
        text = f.read()
    seen: Dict[str, int] = {}
    found = set()
    for _, line in prose_lines(text):
        match = HEADING.match(line)
        if not match:
            continue
        base = anchor(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else "%s-%d" % (base, count))
    return found


def links(page: str) -> List[Tuple[int, str]]:
    """(line number, target) of every link of `page` (relative to the repository) outside code."""
    with open(os.path.join(paths.REPO_ROOT, page)) as f:
        text = f.read()
    lines = list(prose_lines(text))
    # Joined with their newlines, so that a link whose text wraps a line is still one link.
    prose = "\n".join(line for _, line in lines)
    prose = CODE_SPAN.sub(lambda m: "x" * len(m.group(0).split("\n")[0]) + "\n" * m.group(0).count("\n"), prose)
    found = []
    for match in LINK.finditer(prose):
        found.append((lines[prose.count("\n", 0, match.start())][0], match.group(2)))
    return found


def broken_links(page: str) -> List[str]:
    """Each link of `page` that does not resolve, as 'page:line: target: why'."""
    broken = []
    for line, target in links(page):
        if EXTERNAL.match(target):
            continue
        where = "%s:%d: %s" % (page, line, target)
        path, _, fragment = target.partition("#")
        resolved = (os.path.normpath(os.path.join(paths.REPO_ROOT, os.path.dirname(page), path)) if path
                    else os.path.join(paths.REPO_ROOT, page))
        if not os.path.exists(resolved):
            broken.append("%s: no such file or folder" % where)
        elif fragment and resolved.endswith(".md") and fragment not in anchors(resolved):
            broken.append("%s: no heading of %s has the anchor #%s"
                          % (where, os.path.relpath(resolved, paths.REPO_ROOT), fragment))
    return broken


class DocsLinksTest(absltest.TestCase):

    def test_every_relative_link_and_anchor_resolves(self):
        checked = sum(len(links(page)) for page in PAGES)
        self.assertGreater(checked, 0)
        broken = [entry for page in PAGES for entry in broken_links(page)]
        self.assertEmpty(broken, "links that do not resolve (fix the path or the #anchor):\n" + "\n".join(broken))

    def test_every_page_is_listed_in_both_readmes(self):
        pages = {page for page in PAGES if page.startswith("docs/") and page != DOCS_INDEX}
        for index in ("README.md", DOCS_INDEX):
            linked = {os.path.normpath(os.path.join(os.path.dirname(index), target.partition("#")[0]))
                      for _, target in links(index)}
            self.assertEmpty(sorted(pages - linked), "pages that %s does not list" % index)

    def test_anchors_follow_githubs_rule(self):
        self.assertEqual("tables-larger-than-a-host", anchor("Tables larger than a host"))
        self.assertEqual("the-exchange-off-the-steps-critical-path",
                         anchor("The exchange off the step's critical path"))
        self.assertEqual("one-host-all-its-cores", anchor("One host, all its cores"))
        self.assertEqual("--distribution-auto_x", anchor("`--distribution` auto_x"))
        self.assertEqual("emulated-hosts", anchor("[Emulated](x.md) hosts"))

    def test_links_in_code_are_not_links(self):
        self.assertEqual([(1, "a.md"), (5, "d.md#e")], self.links_of(
            "[a](a.md) and `[b](b.md)`\n```\n[c](c.md)\n```\n[wrapped\ntext `x`](d.md#e)\n"))

    def links_of(self, text: str) -> List[Tuple[int, str]]:
        page = os.path.join(self.create_tempdir().full_path, "page.md")
        with open(page, "w") as f:
            f.write(text)
        return links(os.path.relpath(page, paths.REPO_ROOT))


if __name__ == "__main__":
    absltest.main()
