"""Every command of the docs runs: the fenced blocks of README.md and docs/*.md, as a user runs them.

The shell blocks (```bash, ```sh, ```console, and untagged blocks whose
lines start with `$ `, of which the `$ ` lines are the commands) and the
```python blocks of each page run in order, in one working directory per
page laid out like the project's root (`tests.command_line.checkout`), as a
user starts them (`tests.command_line`: a minimal environment, relative
paths). A block runs as written unless the line just before its fence is a
mark (an HTML comment, invisible on the rendered page):

* `<!-- docs-test: run with: OLD => NEW; OLD => NEW -->`: the block runs
  with each OLD replaced by NEW (sizes scaled down for the suite, a
  placeholder filled in). `{CRITEO_DIR}` in a NEW stands for the real
  Criteo rows (`tests.paths.CRITEO_DIR`). Every OLD must be in the block,
  so the mark cannot outlive what it changes.
* `<!-- docs-test: not run: REASON -->`: the block cannot run here (the
  AWS API, a real cluster, a machine of many cores, a template with
  placeholders, the content of a file). Each of its commands is checked
  instead: the program exists (the module, script, console script or make
  target) and every flag it passes is one the program defines, read from
  the program's own `--helpfull` (absl) or `--help` (argparse); the flags
  after `--` of `deepfm.launch`, `deepfm.sagemaker` and `deepfm.kubernetes`
  against `deepfm.train`'s, and `deepfm.launch`'s by the launcher's own
  check (a `--model_dir`).
* `<!-- docs-test: as PAGE -->`: the same commands as a block of PAGE (run
  there): checked to be identical, not run twice.

The commands the prose shows in code spans (`python -m MODULE ...`, as
docs/benchmarks.md gives the command behind each result) are checked the
same way, not run.

A page that needs the main job's dataset gets `data/synthetic` first, as
`make train` writes it, at 20,000 rows (`SYNTHETIC_ROWS`): written once per
test process and copied into each such page's directory. Each program's
help (the flags it defines) is likewise read once per test process.
Commands that start emulated hosts need root: without it the page's test
skips at that block, saying so. A renamed flag, a broken command or a stale mark fails
the page's test, naming the page and line.

Once its blocks have run, a page's test may check what the page says they
produce (`DocsPage.check_outcome`): docs/training.md's Criteo run stops
early and its export scores the held-out rows (the flow the page walks
through, checked on the page's own run rather than on a second one).

Cost: about 330 s of CPU over the pages, every process counted (the jobs
`deepfm.launch` starts on docs/strategies.md, docs/large_batch.md and
docs/api.md, and the SageMaker and Kubernetes jobs on emulated hosts take
most of it): about 4 minutes of the suite's two cores. Each page is a test
class of its own, so that the two test processes of `make test` share
them.
"""

import configparser
import dataclasses
import glob
import os
import re
import shlex
import shutil
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Set, Tuple

import pytest
import tensorflow as tf

from jobs.local import hosts, launcher
from tests import command_line, flow_checks, paths

PAGES = ["README.md"] + sorted(os.path.relpath(p, paths.REPO_ROOT)
                               for p in glob.glob(os.path.join(paths.REPO_ROOT, "docs", "*.md")))
FENCE = re.compile(r"^```(\w*)\s*$")
MARK = re.compile(r"^<!-- docs-test: (run with: |not run: |as )(.+?) -->$")
RUN_WITH, NOT_RUN, AS = "run with", "not run", "as"
SHELL_LANGUAGES = ("bash", "sh", "shell", "console")
PYTHON_LANGUAGE = "python"
PROMPT = "$ "
# A code span of the prose that is a command: a module run with `python -m` (not `python -m ...` or
# `python -m MODULE`, which stand for any).
INLINE_COMMAND = re.compile(r"`(python -m [a-z_][^`]*)`")
# A line of an output block that is a command of this project all the same (it would go untested).
UNMARKED_COMMAND = re.compile(r"^(python3? -m |make |deepfm-|criteo-)")
REPLACEMENT = " => "
CRITEO_PLACEHOLDER = "{CRITEO_DIR}"
# The main job's dataset (`make train` writes 1M rows), at a size every page's commands train on in seconds
# and whose training split still holds a batch of 8,192 (docs/large_batch.md).
SYNTHETIC_ROWS = 20_000
SYNTHETIC = ("python", "-m", "dataprep.synthetic", "--rows", str(SYNTHETIC_ROWS), "--output_dir", "data/synthetic")
BLOCK_TIMEOUT_S = 900
# Ends what a block started in the background (`cmd &`) when the block ends, failed or not: a job left
# holding the output would keep the test waiting until BLOCK_TIMEOUT_S.
END_BACKGROUND_JOBS = "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n"
# Commands that start emulated hosts (network namespaces: root).
HOST_COMMANDS = ("deepfm.sagemaker local", "deepfm.kubernetes local", "jobs.sagemaker.processing local")
# Programs whose flags after `--` are deepfm.train's (unless `--program` runs a script of one's own).
TRAIN_FLAGS_AFTER_DOUBLE_DASH = ("deepfm.launch", "deepfm.sagemaker", "deepfm.kubernetes")
TRAIN_MODULE = "deepfm.train"
LAUNCH_MODULE = "deepfm.launch"
# The log directory `deepfm.launch` makes for itself without `--log_dir`, as its output names it.
# Where a command of a user's environment (no TMPDIR) makes its temporary files.
USER_TMP_DIR = "/tmp"
LAUNCHER_LOG_DIR = re.compile(r"logs in (/\S*?/deepfm-launch-[A-Za-z0-9_]+)")
HELP_TIMEOUT_S = 300
# Tokens of a template that stand for omitted arguments.
ELLIPSIS = "..."
HELP_FLAG = re.compile(r"--(?:\[no\])?([A-Za-z_][\w.-]*)")
# The flags each program defines, read from its help once per test process: (kind, name) -> flags.
HELP_FLAGS: Dict[Tuple[str, str], Set[str]] = {}
# `data/synthetic` as `SYNTHETIC` writes it, made once per test process (its rows depend on its flags
# alone) and copied into the directory of each page that needs it.
SYNTHETIC_DIR = os.path.join("data", "synthetic")
SYNTHETIC_MADE: List[str] = []


@dataclasses.dataclass(frozen=True)
class Block:
    """A fenced block of a page that holds commands.

    Attributes:
      page: the page, relative to the repository's root.
      line: the line of its opening fence.
      language: `shell` or `python`.
      text: what runs: a shell script (a transcript's commands alone) or Python source.
      mark: (kind, argument) of the mark before it, or None.
      shown: a transcript's output: its lines that are not commands ("" for
        other blocks).
    """

    page: str
    line: int
    language: str
    text: str
    mark: Optional[Tuple[str, str]]
    shown: str = ""

    @property
    def where(self) -> str:
        return "%s:%d" % (self.page, self.line)


def transcript_commands(body: str) -> str:
    """The commands of a transcript: each `$ ` line and the lines that continue it (a trailing `\\`)."""
    return _transcript_parts(body)[0]


def transcript_output(body: str) -> str:
    """The output a transcript shows: its lines that are not commands."""
    return _transcript_parts(body)[1]


def _transcript_parts(body: str) -> Tuple[str, str]:
    commands, shown, continued = [], [], False
    for line in body.splitlines():
        if continued or line.startswith(PROMPT):
            commands.append(line[len(PROMPT):] if not continued else line)
            continued = line.endswith("\\")
        else:
            shown.append(line)
    return "\n".join(commands) + "\n", "\n".join(shown) + "\n"


def page_blocks(page: str) -> List[Block]:
    """The blocks of `page` that hold commands, in order."""
    with open(os.path.join(paths.REPO_ROOT, page)) as f:
        lines = f.read().splitlines()
    blocks, index = [], 0
    while index < len(lines):
        fence = FENCE.match(lines[index])
        if not fence:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        body = "\n".join(lines[index + 1:end]) + "\n"
        mark = MARK.match(lines[index - 1]) if index else None
        mark = (mark.group(1).rstrip(": "), mark.group(2)) if mark else None
        language = fence.group(1)
        if language in SHELL_LANGUAGES:
            is_transcript = any(line.startswith(PROMPT) for line in body.splitlines())
            blocks.append(Block(page, index + 1, "shell", transcript_commands(body) if is_transcript else body, mark,
                                transcript_output(body) if is_transcript else ""))
        elif language == PYTHON_LANGUAGE:
            blocks.append(Block(page, index + 1, "python", body, mark))
        elif not language and any(line.startswith(PROMPT) for line in body.splitlines()):
            blocks.append(Block(page, index + 1, "shell", transcript_commands(body), mark, transcript_output(body)))
        elif mark:
            raise AssertionError("%s:%d: a docs-test mark before a block of no commands" % (page, index + 1))
        elif not language and any(UNMARKED_COMMAND.match(line) for line in body.splitlines()):
            raise AssertionError("%s:%d: a block of no language holds a command without a `$ ` prompt: tag the "
                                 "block bash or prompt the command, so that it runs" % (page, index + 1))
        index = end + 1
    return blocks


def inline_commands(page: str) -> List[Tuple[int, str]]:
    """(line, command) of each code span of `page`'s prose that is a command (`python -m MODULE ...`).

    A span may wrap over lines (joined with spaces); fenced blocks are not prose.
    """
    with open(os.path.join(paths.REPO_ROOT, page)) as f:
        lines = f.read().splitlines()
    prose, fenced = [], False
    for line in lines:
        if line.startswith("```"):
            fenced = not fenced
            prose.append("")
        else:
            prose.append("" if fenced else line)
    text = "\n".join(prose)
    return [(text.count("\n", 0, span.start()) + 1, " ".join(span.group(1).split()))
            for span in INLINE_COMMAND.finditer(text)]


def replaced(block: Block) -> str:
    """The text of `block` with its `run with` replacements; each OLD must be in the block."""
    text = block.text
    for pair in block.mark[1].split(";"):
        old, separator, new = pair.strip().partition(REPLACEMENT)
        assert separator and old, "%s: a replacement is written OLD => NEW, got %r" % (block.where, pair)
        assert old in text, "%s: the mark replaces %r, which the block does not hold" % (block.where, old)
        text = text.replace(old, new.replace(CRITEO_PLACEHOLDER, paths.CRITEO_DIR))
    return text


SEPARATORS = (";", "&&", "||", "|", "&")
REDIRECTIONS = (">", ">>", "<", ">&", "<&")


def simple_commands(script: str) -> List[List[str]]:
    """The simple commands of a shell script (continued lines joined, split at `;`, `&&`, `|`, `&`), as words.

    Comments and redirections (with their file) are left out.
    """
    found = []
    for line in re.sub(r"\\\n", " ", script).splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words, redirected = [], False
        for token in lexer:
            if redirected:
                redirected = False
            elif token in SEPARATORS:
                if words:
                    found.append(words)
                words = []
            elif token in REDIRECTIONS:
                redirected = True
            else:
                words.append(token)
        if words:
            found.append(words)
    return found


def program_of(words: Sequence[str]) -> Tuple[str, str, List[str]]:
    """(kind, name, arguments) of a simple command: `module`, `script`, `make`, or `other`."""
    words = [w for w in words if not re.match(r"^[A-Z_][A-Z0-9_]*=", w)]  # VAR=value prefixes
    if not words:
        return "other", "", []
    program, rest = words[0], list(words[1:])
    if os.path.basename(program).startswith("python"):
        if rest[:1] == ["-m"] and len(rest) > 1:
            return "module", rest[1], rest[2:]
        if rest and rest[0].endswith(".py"):
            return "script", rest[0], rest[1:]
        return "other", program, rest
    if program == "make":
        return "make", "make", rest
    scripts = console_scripts()
    if program in scripts:
        return "module", scripts[program], rest
    return "other", program, rest


def console_scripts() -> Dict[str, str]:
    """setup.cfg's console scripts: name -> module."""
    parser = configparser.ConfigParser()
    parser.read(os.path.join(paths.REPO_ROOT, "setup.cfg"))
    return {name.strip(): target.strip().partition(":")[0] for name, _, target in (
        line.partition("=") for line in parser["options.entry_points"]["console_scripts"].strip().splitlines())}


def flag_names(arguments: Sequence[str]) -> List[str]:
    """The names of the flags among `arguments` (template brackets and `...` left out)."""
    names = []
    for argument in arguments:
        argument = argument.strip("[]")
        if argument.startswith("-") and argument not in ("-", ELLIPSIS) and not re.match(r"^-\d", argument):
            names.append(argument.lstrip("-").split("=", 1)[0])
    return names


class ProgramChecks:
    """Checks a command without running it: its program exists and defines every flag given."""

    def setUp(self):
        super().setUp()
        self.cwd = command_line.checkout(tempfile.mkdtemp(prefix="docs-", dir=self.get_temp_dir()))

    def help_text(self, kind: str, name: str) -> Set[str]:
        """The flags a program defines, from its own help (`--helpfull`, else `--help`), read once per process.

        A program's help depends on its code alone, so the pages share it
        (`deepfm.train`'s is read for most of them).
        """
        key = (kind, name)
        if key not in HELP_FLAGS:
            start = command_line.python_module(name) if kind == "module" else ["python", name]
            result = command_line.run(start + ["--helpfull"], self.cwd, timeout=HELP_TIMEOUT_S)
            if result.returncode != 0:
                result = command_line.run(start + ["--help"], self.cwd, timeout=HELP_TIMEOUT_S)
            self.assertEqual(0, result.returncode, "%s %s --help: %s" % (kind, name, result.stderr[-2000:]))
            HELP_FLAGS[key] = set(HELP_FLAG.findall(result.stdout))
        return HELP_FLAGS[key]

    def assert_flags_defined(self, where: str, program: str, defined: Set[str], arguments: Sequence[str]) -> None:
        for flag in flag_names(arguments):
            self.assertTrue(flag in defined or (flag.startswith("no") and flag[2:] in defined),
                            "%s: %s defines no --%s" % (where, program, flag))

    def check_command(self, words: Sequence[str], where: str) -> bool:
        """Checks one simple command; returns whether it is one of this project's (else it is left alone).

        A module or script must exist and define every flag given; the flags
        after `--` of the programs that pass them to `deepfm.train` must be
        `deepfm.train`'s, and `deepfm.launch`'s must pass the launcher's own
        check (`--model_dir` given). A make target must exist (`make -n`).
        """
        kind, name, arguments = program_of(words)
        where = "%s: %s" % (where, " ".join(words))
        if kind == "make":
            result = command_line.run(["make", "-n", "-C", paths.REPO_ROOT] + arguments, self.cwd, timeout=60)
            self.assertEqual(0, result.returncode, "%s: %s" % (where, result.stderr[-1000:]))
            return True
        if kind not in ("module", "script"):
            return False
        if kind == "script":
            self.assertTrue(os.path.exists(os.path.join(self.cwd, name)), "%s: no file %s" % (where, name))
        split = arguments.index("--") if "--" in arguments else len(arguments)
        own, after = arguments[:split], arguments[split + 1:]
        self.assert_flags_defined(where, name, self.help_text(kind, name), own)
        program = [w for w in own if w.startswith("--program")]
        if name in TRAIN_FLAGS_AFTER_DOUBLE_DASH and not program:
            self.assert_flags_defined(where, TRAIN_MODULE, self.help_text("module", TRAIN_MODULE), after)
        if name == LAUNCH_MODULE and split < len(arguments):
            try:
                launcher.check_train_args(after, program="x" if program else "")
            except ValueError as e:
                self.fail("%s: %s" % (where, e))
        return True


def story(output: str) -> List[str]:
    """The events of a run of `deepfm.kubernetes local`, without what differs between runs: the steps of the
    checkpoints, the log directories, the order in which the pods of the last attempt end."""
    lines = [re.sub(r"; logs in .*$", "", re.sub(r"step \d+", "step N", line)) for line in output.splitlines()]
    return [line for line in lines if line.strip() and not line.endswith("exited with code 0: succeeded")]


def remove_launcher_logs(output: str) -> List[str]:
    """Removes the log directories `deepfm.launch` made for itself (no `--log_dir`) that `output` names.

    A user keeps them to read; the suite leaves nothing in the machine's
    temporary directory. Only directories of the launcher's own prefix in
    that directory are removed.

    Returns:
      The directories removed.
    """
    removed = []
    for directory in sorted(set(LAUNCHER_LOG_DIR.findall(output))):
        if os.path.dirname(directory) in (tempfile.gettempdir(), USER_TMP_DIR) and os.path.isdir(directory):
            shutil.rmtree(directory)
            removed.append(directory)
    return removed


class DocsPage(ProgramChecks):
    """Runs the blocks of `PAGE` in order: mixed into a `tf.test.TestCase` per page (itself no test)."""

    # Each page's commands start processes (training jobs, emulated hosts): CI runs them all the same.
    pytestmark = [pytest.mark.slow]
    PAGE = ""
    # Whether the page's commands read `data/synthetic` without writing it first.
    NEEDS_SYNTHETIC = False

    def check_outcome(self, outputs: Dict[int, str]) -> None:
        """Checks what the page says its commands produce, once every block has run; nothing by default.

        Args:
          outputs: the standard output of each block run, by the line of its
            opening fence.
        """

    def run_script(self, block: Block, text: str) -> str:
        """Runs `text` of `block` in the page's working directory; fails the test naming the block.

        Returns:
          What the block wrote to its standard output.
        """
        if block.language == "python":
            path = os.path.join(self.cwd, "docs_block_%d.py" % block.line)
            with open(path, "w") as f:
                f.write(text)
            command = ["python", os.path.basename(path)]
        else:
            command = END_BACKGROUND_JOBS + text
        result = command_line.run(command, self.cwd, env=command_line.NO_AWS_CREDENTIALS, timeout=BLOCK_TIMEOUT_S)
        remove_launcher_logs(result.stdout + result.stderr)
        self.assertEqual(0, result.returncode, "%s:\n%s" % (block.where, command_line.describe(text, result)))
        return result.stdout

    def copy_synthetic(self) -> None:
        """Puts `data/synthetic` into the page's directory: `SYNTHETIC`'s output, made on the first call."""
        if not SYNTHETIC_MADE:
            made_in = tempfile.mkdtemp(prefix="docs-synthetic-", dir=tf.compat.v1.test.get_temp_dir())
            result = command_line.run(list(SYNTHETIC), made_in, timeout=300)
            self.assertEqual(0, result.returncode, command_line.describe(list(SYNTHETIC), result))
            SYNTHETIC_MADE.append(os.path.join(made_in, SYNTHETIC_DIR))
        shutil.copytree(SYNTHETIC_MADE[0], os.path.join(self.cwd, SYNTHETIC_DIR), symlinks=True)

    def check_flags(self, block: Block) -> None:
        """Checks that every command of a block not run here names a program that exists, with its flags.

        A Python block not run here (the content of a file) is compiled.
        """
        if block.language == "python":
            compile(block.text, block.where, "exec")
            return
        checked = [self.check_command(words, block.where) for words in simple_commands(block.text)]
        self.assertTrue(any(checked), "%s: a block marked not run holds no command of this project" % block.where)

    def check_same_as(self, block: Block) -> None:
        """A block marked `as PAGE`: each of its commands is a command of a block of PAGE."""
        page = block.mark[1]
        elsewhere = {tuple(words) for other in page_blocks(page) for words in simple_commands(other.text)}
        for words in simple_commands(block.text):
            self.assertIn(tuple(words), elsewhere, "%s: not a command of %s: %s" % (block.where, page, " ".join(words)))

    def test_every_command_runs_or_is_checked(self):
        blocks = page_blocks(self.PAGE)
        self.assertNotEmpty(blocks, "%s holds no commands; drop its test class" % self.PAGE)
        if self.NEEDS_SYNTHETIC:
            self.copy_synthetic()
        outputs: Dict[int, str] = {}
        for block in blocks:
            kind = block.mark[0] if block.mark else None
            if kind == NOT_RUN:
                self.check_flags(block)
                continue
            if kind == AS:
                self.check_same_as(block)
                continue
            text = replaced(block) if kind == RUN_WITH else block.text
            if CRITEO_PLACEHOLDER in (block.mark or ("", ""))[1] and not os.path.isdir(paths.CRITEO_DIR):
                self.skipTest("%s needs the real Criteo rows, absent (%s; set %s)"
                              % (block.where, paths.CRITEO_DIR, paths.CRITEO_DIR_VARIABLE))
            if any(command in " ".join(" ".join(w) for w in simple_commands(text)) for command in HOST_COMMANDS):
                reason = hosts.check_privileges()
                if reason:
                    self.skipTest("%s starts emulated hosts: %s" % (block.where, reason))
            started = time.monotonic()
            outputs[block.line] = self.run_script(block, text)
            # In the captured output (`pytest -rA` shows it): what each block cost.
            print("%s ran in %.1f s" % (block.where, time.monotonic() - started))
        self.check_outcome(outputs)


class MarksTest(tf.test.TestCase):
    """Every page with commands has a test class; the marks are well formed."""

    def test_every_page_with_commands_is_tested(self):
        tested = {cls.PAGE for cls in DocsPage.__subclasses__()}
        with_commands = {page for page in PAGES if page_blocks(page)}
        self.assertEqual(with_commands, tested)

    def test_a_mark_names_a_known_kind(self):
        for page in PAGES:
            with open(os.path.join(paths.REPO_ROOT, page)) as f:
                for number, line in enumerate(f, 1):
                    if line.startswith("<!-- docs-test"):
                        self.assertRegex(line.strip(), MARK, "%s:%d" % (page, number))

    def test_the_parts_of_a_block(self):
        self.assertEqual("python -m x --a 1 \\\n    --b 2\nls\n",
                         transcript_commands("$ python -m x --a 1 \\\n    --b 2\nout\n$ ls\nmore out\n"))
        self.assertEqual([["python", "-m", "m", "--a"], ["cp", "x", "y"], ["python", "-m", "n"]],
                         simple_commands("python -m m --a > log && cp x y  # note\npython -m n &\n"))
        self.assertEqual(("module", "deepfm.sagemaker", ["local", "--x=1"]),
                         program_of(["SAGEMAKER_BASE_DIR=/tmp/ml", "/tmp/venv/bin/python", "-m",
                                     "deepfm.sagemaker", "local", "--x=1"]))
        self.assertEqual(["a", "b", "c"], flag_names(["--a=1", "x", "[--b", "c]", "-c", ELLIPSIS, "-3"]))
        self.assertEqual(["python -m a --x\n1"], [span.group(1) for span in INLINE_COMMAND.finditer(
            "run `python -m a --x\n1`, or `python -m ...` or `python -m MODULE` for any, `python3 x.py`")])


    def test_the_launchers_own_log_directories_are_removed_and_nothing_else(self):
        own = tempfile.mkdtemp(prefix="deepfm-launch-")
        os.makedirs(os.path.join(own, "restart_1"))
        other = tempfile.mkdtemp(prefix="deepfm-other-")
        nested = os.path.join(other, "deepfm-launch-x")
        os.makedirs(nested)
        self.addCleanup(lambda: [tf.io.gfile.rmtree(d) for d in (own, other) if os.path.isdir(d)])
        output = "started chief_0; logs in %s\nrestart 1 of 1: ... (logs in %s/restart_1)\nlogs in %s\nlogs in %s\n" % (
            own, own, other, nested)
        self.assertEqual([own], remove_launcher_logs(output))
        self.assertFalse(os.path.exists(own))
        self.assertTrue(os.path.isdir(nested))

@pytest.mark.slow
class InlineCommandsTest(ProgramChecks, tf.test.TestCase):
    """The commands the pages' prose shows in code spans (`python -m ...`): each program and flag exists."""

    def test_every_inline_command_names_its_programs_flags(self):
        checked = 0
        for page in PAGES:
            for line, command in inline_commands(page):
                for words in simple_commands(command):
                    checked += self.check_command(words, "%s:%d" % (page, line))
        self.assertGreater(checked, 0)


# One class per page with commands, so that the two test processes share the pages.
class ReadmeTest(DocsPage, tf.test.TestCase):
    PAGE = "README.md"
    NEEDS_SYNTHETIC = True


class ApiTest(DocsPage, tf.test.TestCase):
    PAGE = "docs/api.md"
    NEEDS_SYNTHETIC = True


class DataTest(DocsPage, tf.test.TestCase):
    PAGE = "docs/data.md"


class InputPipelineTest(DocsPage, tf.test.TestCase):
    PAGE = "docs/input_pipeline.md"
    NEEDS_SYNTHETIC = True


class KubernetesTest(DocsPage, tf.test.TestCase):
    PAGE = "docs/kubernetes.md"
    # The rehearsal of failures and elastic restarts: the block that passes faults, and the global step the
    # page says its job ends at (two workers' budget: each 2 epochs of its half of 18,000 rows at batch 256).
    REHEARSAL_FLAG = "--fault"
    REHEARSAL_JOB = "ctr-elastic"
    REHEARSAL_GLOBAL_STEP = 140
    REHEARSAL_WORKERS = 2
    # The least AUC of the rehearsal's model (the page's run without faults: 0.7534).
    REHEARSAL_MIN_AUC = 0.7

    def check_outcome(self, outputs: Dict[int, str]) -> None:
        """The rehearsal tells the page's story, line for line, and its job ends at the page's step, learned.

        Its killed chief pod, recreated in a job of two workers and a parameter
        server that ends at its budget with a model that learned and one
        export, is tests/jobs/kubernetes/test_local.py's case of a killed pod.

        The faults act in order, one at a time, so a replay tells the same
        story whatever the pods' timing (tests/jobs/kubernetes/test_faults.py
        has the race that once changed it); only the steps of the checkpoints,
        the log directories and the order in which the last attempt's pods end
        differ between runs (`story`).
        """
        block = next(b for b in page_blocks(self.PAGE) if self.REHEARSAL_FLAG in b.text)
        self.assertEqual(story(block.shown), story(outputs[block.line]), outputs[block.line])
        volume = os.path.join(self.cwd, "volume", self.REHEARSAL_JOB)
        metrics = flow_checks.read_json(os.path.join(volume, "metrics.json"))
        # Asynchronous workers each stop when they see the budget reached: up to one step each lands after it,
        # and the chief may record one step before the last.
        self.assertBetween(metrics["global_step"], self.REHEARSAL_GLOBAL_STEP - 1,
                           self.REHEARSAL_GLOBAL_STEP + self.REHEARSAL_WORKERS)
        self.assertLen(glob.glob(os.path.join(volume, "export", "*", "saved_model.pb")), 1)
        self.assertIn("1 parameter server(s), 2 worker(s)", metrics["strategy"])
        self.assertIn("chief_0", metrics["strategy"])
        self.assertGreater(metrics["auc"], self.REHEARSAL_MIN_AUC, metrics)


class LargeBatchTest(DocsPage, tf.test.TestCase):
    PAGE = "docs/large_batch.md"
    NEEDS_SYNTHETIC = True


class ManyCoresTest(DocsPage, tf.test.TestCase):
    PAGE = "docs/many_cores.md"


class PredictingTest(DocsPage, tf.test.TestCase):
    PAGE = "docs/predicting.md"


class SageMakerTest(DocsPage, tf.test.TestCase):
    PAGE = "docs/sagemaker.md"
    # The page's job run locally: two hosts, parameter servers, its output directory and the global step it says
    # the job ends at (two asynchronous workers, each 2 epochs of its 2,700 rows at batch 128).
    LOCAL_RUN = "runs/sm-ps"
    LOCAL_RUN_GLOBAL_STEP = 84
    LOCAL_RUN_WORKERS = 2
    LOCAL_RUN_MIN_AUC = 0.6

    def check_outcome(self, outputs: Dict[int, str]) -> None:
        """The job run locally left what the page says, host by host.

        Each host's `/opt/ml` under the output directory (its configuration,
        its channels with their metadata, `output/success`), the SavedModel on
        algo-1 alone, the checkpoints with both parameter servers' shards at
        the job's last step (algo-2's parameter server stayed up for the
        chief's last save), the metric series, and the console's line per host.
        """
        run = os.path.join(self.cwd, self.LOCAL_RUN)
        out = "\n".join(outputs.values())
        self.assertIn("algo-1: success", out)
        self.assertIn("algo-2: success, 0 model file(s)", out)
        metrics = flow_checks.read_json(os.path.join(run, "algo-1", "output", "data", "metrics.json"))
        self.assertIn("this is master_0", metrics["strategy"])
        self.assertIn("2 parameter server(s), 2 worker(s)", metrics["strategy"])
        # A worker may take a step more while the other's last one lands.
        self.assertBetween(metrics["global_step"], self.LOCAL_RUN_GLOBAL_STEP,
                           self.LOCAL_RUN_GLOBAL_STEP + self.LOCAL_RUN_WORKERS)
        self.assertGreater(metrics["auc"], self.LOCAL_RUN_MIN_AUC)
        for host, exports in (("algo-1", 1), ("algo-2", 0)):
            self.assertLen(glob.glob(os.path.join(run, host, "model", "*", "saved_model.pb")), exports, host)
            self.assertTrue(os.path.exists(os.path.join(run, host, "output", "success")), host)
            for channel in ("train", "validation"):
                self.assertTrue(os.path.exists(os.path.join(run, host, "input", "data", channel, "metadata.json")))
            config = flow_checks.read_json(os.path.join(run, host, "input", "config", "resourceconfig.json"))
            self.assertEqual(host, config["current_host"])
        latest = tf.train.latest_checkpoint(os.path.join(run, "checkpoints"))
        self.assertEqual(metrics["global_step"], int(latest.rsplit("-", 1)[1]))
        self.assertEqual(["00000-of-00002", "00001-of-00002"],
                         sorted(path[-len("00000-of-00002"):] for path in glob.glob(latest + ".data-*")))
        series = flow_checks.read_json(os.path.join(run, "metric_series.json"))["algo-1"]
        self.assertEqual([round(metrics["auc"], 4)], series["validation:auc"])


class StrategiesTest(DocsPage, tf.test.TestCase):
    PAGE = "docs/strategies.md"
    NEEDS_SYNTHETIC = True


class TrainingTest(DocsPage, tf.test.TestCase):
    PAGE = "docs/training.md"
    # The page's Criteo rows: the test rows its batch prediction scores, and the least test AUC of its run,
    # scaled down by the mark (the page's model scores 0.727 on them; the smaller one, trained less, learns).
    CRITEO_TEST_ROWS = 1000
    CRITEO_MIN_TEST_AUC = 0.62

    def check_outcome(self, outputs: Dict[int, str]) -> None:
        """The Criteo run stopped early, exported its best checkpoint, which scores the validation rows with the
        run's AUC, and the page's batch prediction scored every test row."""
        metrics = flow_checks.read_json(os.path.join(self.cwd, "runs/criteo/metrics.json"))
        self.assertTrue(metrics["stopped_early"], metrics)
        self.assertLess(metrics["best_step"], metrics["global_step"])
        export = flow_checks.only_export(self.cwd, "runs/criteo/export")
        flow_checks.assert_predictions_match(self, self.cwd, export, "data/criteo/validation",
                                             "runs/criteo/validation_predictions.csv",
                                             flow_checks.validation_rows(self.cwd, "data/criteo"), metrics["auc"])
        self.assertTrue(any("scored %d rows" % self.CRITEO_TEST_ROWS in output for output in outputs.values()),
                        outputs)
        probs, labels = flow_checks.read_predictions(os.path.join(self.cwd, "runs/criteo/test_predictions.csv"))
        self.assertLen(probs, self.CRITEO_TEST_ROWS)
        self.assertGreater(flow_checks.exact_auc(labels, probs), self.CRITEO_MIN_TEST_AUC)


if __name__ == "__main__":
    tf.test.main()
