"""`witty-profiler skill install|validate|eval|layers`: the Agent Skills the package ships (bottleneck
identification, data-flow topology, hotspot threads).

The skill ships inside the package (`witty_profiler/skill`, a link to
`skills/bottleneck-identification` in the repository), so these commands work after a plain
`pip install` as well as from a checkout.
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.resources
import importlib.util
import json
import re
import shutil
from pathlib import Path
from typing import Any

from witty_profiler.topology.errors import InputError
from witty_profiler.topology.wording import counted

SKILL_NAME = "bottleneck-identification"
# every skill the package ships: installed folder name -> package folder (a link to skills/<name>)
SKILLS = {SKILL_NAME: "skill", "dataflow-topology-restore": "skill_dataflow",
          "hotspot-thread-discovery": "skill_hotspot"}
DEFAULT_SKILLS_DIR = Path("~/.claude/skills")
# Agent Skills specification limits (agentskills.io/specification)
NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
NAME_MAX, DESCRIPTION_MAX, COMPATIBILITY_MAX, BODY_MAX_LINES = 64, 1024, 500, 500
FRONTMATTER_KEYS = {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
MIN_EVALS = 8
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")


def bundled_skill(name: str = SKILL_NAME) -> Path:
    """A skill folder of the installed package (resolved, so a checkout's link is followed)."""
    path = Path(str(importlib.resources.files("witty_profiler").joinpath(SKILLS[name]))).resolve()
    if not (path / "SKILL.md").is_file():
        raise InputError(f"{path}: the installed witty-profiler has no bundled skill; reinstall the package")
    return path


def _skill_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


def same_tree(a: Path, b: Path) -> bool:
    files = _skill_files(a)
    return files == _skill_files(b) and all(filecmp.cmp(a / f, b / f, shallow=False) for f in files)


def install(dest: Path | None = None, force: bool = False, source: Path | None = None,
            name: str = SKILL_NAME) -> tuple[Path, str]:
    """Copy a skill into DEST/<name>. Returns (target, what happened)."""
    source = source or bundled_skill(name)
    target = (dest or DEFAULT_SKILLS_DIR).expanduser() / name
    if target.exists() and not target.is_dir():
        raise InputError(f"{target}: exists and is not a directory")
    if target.exists():
        if same_tree(source, target):
            return target, "already installed, identical"
        if not force:
            raise InputError(f"{target}: a different copy of the skill is installed there; "
                             "pass --force to replace it")
        if any(target.iterdir()) and not (target / "SKILL.md").is_file():
            raise InputError(f"{target}: not a skill folder (no SKILL.md); refusing to replace it")
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, target, ignore=_IGNORED)
    for script in [*target.glob("scripts/*.sh"), *target.glob("evals/*.py")]:
        script.chmod(0o755)  # wheels do not always keep the executable bit
    return target, "replaced" if force else "installed"


def read_frontmatter(skill_md: Path) -> tuple[dict[str, Any], list[str]]:
    """(frontmatter mapping, body lines); raises InputError when there is no valid frontmatter."""
    text = skill_md.read_text(encoding="utf-8")
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---" or "---" not in (line.strip() for line in lines[1:]):
        raise InputError(f"{skill_md}: no YAML frontmatter (the file must start with a '---' block)")
    end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    import yaml  # only here: the rest of the CLI never pays for it
    try:
        meta = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError as exc:
        raise InputError(f"{skill_md}: frontmatter is not valid YAML ({exc.__class__.__name__})") from None
    if not isinstance(meta, dict):
        raise InputError(f"{skill_md}: frontmatter must be a mapping of keys to values")
    return meta, lines[end + 1:]


def _frontmatter_problems(meta: dict[str, Any], body: list[str], folder: str) -> list[str]:
    problems = [f"unknown frontmatter key {k!r} (allowed: {', '.join(sorted(FRONTMATTER_KEYS))})"
                for k in sorted(set(meta) - FRONTMATTER_KEYS)]
    name, description = meta.get("name"), meta.get("description")
    if not isinstance(name, str) or not NAME_RE.match(name) or len(name) > NAME_MAX:
        problems.append(f"name {name!r}: 1-{NAME_MAX} lowercase letters, digits and single hyphens")
    elif name != folder:
        problems.append(f"name {name!r} differs from the folder name {folder!r}")
    if not isinstance(description, str) or not description.strip():
        problems.append("description: missing or empty")
    elif len(description) > DESCRIPTION_MAX:
        problems.append(f"description: {len(description)} characters, at most {DESCRIPTION_MAX}")
    elif "<" in description or ">" in description:
        problems.append("description: must not contain '<' or '>'")
    compat = meta.get("compatibility")
    if compat is not None and (not isinstance(compat, str) or len(compat) > COMPATIBILITY_MAX):
        problems.append(f"compatibility: a string of at most {COMPATIBILITY_MAX} characters")
    extra = meta.get("metadata")
    if extra is not None and not (isinstance(extra, dict) and all(isinstance(v, str) for v in extra.values())):
        problems.append("metadata: a mapping of string keys to string values")
    if len(body) >= BODY_MAX_LINES:
        problems.append(f"body: {len(body)} lines, keep it under {BODY_MAX_LINES} (move detail to references/)")
    return problems


def _link_problems(root: Path, text: str) -> list[str]:
    """Every references/, scripts/ or evals/ path SKILL.md mentions must exist."""
    mentioned = set(re.findall(r"\b((?:references|scripts|evals)/[\w.-]+\.\w+)", text))
    return [f"SKILL.md mentions {m}, which does not exist" for m in sorted(mentioned) if not (root / m).is_file()]


def catalog_pattern_ids() -> list[str]:
    """Every pattern id the diagnosis catalog defines."""
    from witty_profiler.diagnosis.catalog import catalog
    return list(catalog())


def _pattern_problems(root: Path, name: str) -> list[str]:
    patterns_md = root / "references" / "patterns.md"
    if name != SKILL_NAME and not patterns_md.is_file():
        return []  # only the diagnosis skill must describe every pattern
    if not patterns_md.is_file():
        return ["references/patterns.md is missing (generate it: witty-profiler patterns --markdown)"]
    text = patterns_md.read_text(encoding="utf-8")
    return [f"references/patterns.md does not describe pattern {pid}" for pid in catalog_pattern_ids()
            if not re.search(rf"(?<![\w.]){re.escape(pid)}(?![\w.])", text)]


def _eval_problems(root: Path) -> list[str]:
    path = root / "evals" / "evals.json"
    try:
        cases = json.loads(path.read_text(encoding="utf-8")).get("evals", [])
    except (OSError, ValueError, AttributeError) as exc:
        return [f"evals/evals.json: unreadable ({exc})"]
    problems = [] if len(cases) >= MIN_EVALS else [f"evals/evals.json: {len(cases)} cases, at least {MIN_EVALS}"]
    for case in cases:
        if not case.get("prompt") or not case.get("assertions"):
            problems.append(f"evals/evals.json: case {case.get('id')!r} needs a prompt and assertions")
    return problems


def validate(root: Path, folder: str | None = None) -> list[str]:
    """All problems of the skill folder ROOT (empty when it is valid). FOLDER: the name the folder
    has where the skill is used (the package's bundle is installed as bottleneck-identification)."""
    root = root.resolve()
    skill_md = root / "SKILL.md"
    if not skill_md.is_file():
        raise InputError(f"{root}: no SKILL.md; give the path of a skill folder")
    meta, body = read_frontmatter(skill_md)
    return (_frontmatter_problems(meta, body, folder or root.name) + _link_problems(root, skill_md.read_text("utf-8"))
            + _pattern_problems(root, folder or root.name) + _eval_problems(root))


def load_eval_runner(root: Path):
    spec = importlib.util.spec_from_file_location("witty_skill_run_evals", root / "evals" / "run_evals.py")
    if spec is None or spec.loader is None or not (root / "evals" / "run_evals.py").is_file():
        raise InputError(f"{root}: no evals/run_evals.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_install(args: argparse.Namespace) -> int:
    for name in SKILLS:  # every skill: the other two run their evals with bottleneck-identification's harness
        target, what = install(Path(args.dest) if args.dest else None, args.force, name=name)
        print(f"{what}: {target}")
    return 0


def _run_validate(args: argparse.Namespace) -> int:
    roots = [(Path(args.path), None)] if args.path else [(bundled_skill(n), n) for n in SKILLS]
    problems = [f"{root.name}: {p}" for root, name in roots for p in validate(root, name)]
    for problem in problems:
        print(problem)
    if problems:
        raise InputError(f"{counted(len(problems), 'problems')}, listed above")
    for root, _ in roots:
        print(f"ok: {root.resolve()}")
    return 0


def _run_eval(args: argparse.Namespace) -> int:
    root = Path(args.path) if args.path else bundled_skill()
    argv = [x for case in args.case or [] for x in ("--case", case)]
    argv += [x for opt in ("inputs", "reports", "keep") if getattr(args, opt) for x in (f"--{opt}", getattr(args, opt))]
    argv += [f"--{flag}" for flag in ("strict", "json") if getattr(args, flag)]
    return load_eval_runner(root.resolve()).main(argv)


def _run_layers(args: argparse.Namespace) -> int:
    from witty_profiler.layers_doc import layers_markdown
    print(layers_markdown(), end="")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("skill", help="install, validate or evaluate the Agent Skills (bottleneck identification, data-flow topology, hotspot threads)")
    actions = p.add_subparsers(dest="skill_command", metavar="ACTION", parser_class=type(p))
    inst = actions.add_parser("install", help="copy every skill into ~/.claude/skills/NAME or DIR/NAME")
    inst.add_argument("--dest", metavar="DIR", help="skills directory (default ~/.claude/skills)")
    inst.add_argument("--force", action="store_true", help="replace a different copy already there")
    inst.set_defaults(handler=_run_install)
    val = actions.add_parser("validate", help="check frontmatter, size limits, references and evals of every skill, or of one folder")
    val.add_argument("path", nargs="?", help="skill folder (default: the one shipped with this package)")
    val.set_defaults(handler=_run_validate)
    ev = actions.add_parser("eval", help="run the skill's evals (evals/run_evals.py)",
                            description="Builds each eval case's input (the shared real sample, or a live scenario), "
                                        "lets the tool write the report (or reads saved ones) and checks the "
                                        "value-level assertions of evals/evals.json. Exit 1 when a case fails.")
    ev.add_argument("--path", help="skill folder (default: the one shipped with this package)")
    ev.add_argument("--case", action="append", help="case id or name (repeat); default all")
    ev.add_argument("--inputs", metavar="DIR", help="where to find input graph files (see evals.json 'inputs')")
    ev.add_argument("--reports", metavar="DIR", help="check saved reports DIR/<case>/report.{json,md} instead")
    ev.add_argument("--keep", metavar="DIR", help="save each case's graph, reports and context here")
    ev.add_argument("--strict", action="store_true", help="a missing input file fails instead of skipping")
    ev.add_argument("--json", action="store_true", help="print the results as JSON")
    ev.set_defaults(handler=_run_eval)
    lay = actions.add_parser("layers", help="print references/layers.md, generated from the catalog and vocabulary")
    lay.set_defaults(handler=_run_layers)
    p.set_defaults(handler=lambda args: p.print_help() or 2)
