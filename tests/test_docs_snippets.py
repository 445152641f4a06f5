"""Every Python code block of README.md and the documentation pages holds against the current API.

A newcomer copies these blocks as written. For each ```python (or ```py) block of README.md and
``docs/*.md`` (not the changelog, whose history names old APIs):

- it parses (the block is dedented by its fence's indent, as in a list item);
- every ``gpupipe.<name>`` attribute and every ``from gpupipe... import name`` exists;
- every call whose target resolves to a gpupipe object (``gpupipe.loader(...)``, ``gpupipe.ops.Y(...)``,
  ``X(...)`` after ``from gpupipe import X``, ``loader.stats(...)`` on a name bound to a loader, an
  attribute such as ``loader.epoch`` or ``ImageFolder(...).labels``) binds to the object's real signature
  (``inspect.signature(obj).bind`` with placeholder values: the argument names and counts, not the values).

One convention, used sparingly: a block right after the line ``<!-- signature -->`` shows a signature
(``gpupipe.loader(source, pipeline=None, *, batch_size, ...)``), which is not a call: it must equal the
object's real signature (names, kinds and defaults, in order).

The last tests run the most important blocks as written on tiny generated data (paths substituted,
``backend="torchvision"`` on the CPU) and check the shapes and dtypes their pages state.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
import warnings
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from types import ModuleType

import pytest

import gpupipe

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "changelog.md")]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?:python|py)[ \t]*$")
SIGNATURE_MARK = "<!-- signature -->"


@dataclass
class Block:
    page: str
    line: int  # the line of the opening fence, 1-based
    code: str
    signature: bool  # shown as a signature, not a call


def page_blocks(page: Path) -> list[Block]:
    """The page's Python blocks, each dedented by its fence's indent."""
    lines = page.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match:
            end = i + 1
            while not lines[end].strip().startswith("```"):
                end += 1
            previous = next((line.strip() for line in reversed(lines[:i]) if line.strip()), "")
            code = textwrap.dedent("\n".join(lines[i + 1 : end]))
            blocks.append(Block(page.name, i + 1, code, previous == SIGNATURE_MARK))
            i = end
        i += 1
    return blocks


BLOCKS = [block for page in PAGES for block in page_blocks(page)]
IDS = [
    f"{block.page}:block{[b for b in BLOCKS if b.page == block.page].index(block) + 1}:line{block.line}"
    for block in BLOCKS
]


def test_the_pages_hold_python_blocks():
    """The extraction finds the blocks a reader sees (a broken fence pattern would test nothing)."""
    pages = {block.page for block in BLOCKS}
    assert {"README.md", "index.md", "loader.md", "ddp.md", "targets.md", "torchvision.md"} <= pages
    assert len(BLOCKS) >= 20


# -- what an expression of a block refers to ---------------------------------------------------------


@dataclass(frozen=True)
class Instance:
    """An object of a gpupipe class, as a call of the class (or of a function returning it) gives it."""

    cls: type


@dataclass(frozen=True)
class Method:
    cls: type
    name: str


def is_gpupipe(obj) -> bool:
    module = obj.__name__ if isinstance(obj, ModuleType) else getattr(obj, "__module__", "") or ""
    return module == "gpupipe" or module.startswith("gpupipe.")


def instance_attributes(cls: type) -> set[str]:
    """Attribute names an instance of ``cls`` has: class attributes, fields, and ``self.x =`` in its code."""
    names = set(dir(cls))
    if cls is gpupipe.Loader:  # gpupipe.DataLoader's loader answers torch's attributes (torchvision.md)
        import torch.utils.data

        names |= set(inspect.signature(torch.utils.data.DataLoader).parameters)
    for klass in cls.__mro__:
        if not is_gpupipe(klass):
            continue
        names |= set(getattr(klass, "__annotations__", {}))
        if is_dataclass(klass):
            names |= {f.name for f in fields(klass)}
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        names |= set(re.findall(r"self\.(\w+)\s*(?::[^=\n]+)?=(?!=)", source))
    return names


def returned_class(obj):
    """The gpupipe class a call of ``obj`` returns, or None where unknown."""
    if inspect.isclass(obj):
        return obj
    annotation = getattr(obj, "__annotations__", {}).get("return")
    if isinstance(annotation, str):
        annotation = getattr(gpupipe, annotation.split("[")[0].strip(), None)
    return annotation if inspect.isclass(annotation) and is_gpupipe(annotation) else None


#: Names a block may use for a loader its page built in an earlier block.
LOADER_NAMES = ("loader", "train_loader", "val_loader", "train", "val")


def passes_through(node: ast.Assign) -> bool:
    """``a, b = wrap(a, b)``: a call given exactly the names it is assigned to (Accelerate's ``prepare``)."""
    target, value = node.targets[0], node.value
    if len(node.targets) != 1 or not isinstance(value, ast.Call) or value.keywords:
        return False
    names = [ast.unparse(t) for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
    return names == [ast.unparse(a) for a in value.args]


def placeholder(node: ast.expr):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return object()


class Checker(ast.NodeVisitor):
    """Walks a block in source order, tracking which names hold gpupipe objects, and checks each use."""

    def __init__(self, partial: bool = False, context: str = ""):
        self.partial = partial  # an inline span may leave arguments out (`gpupipe.loader(..., shuffle=False)`)
        self.context = context  # the page's lines: an old name is fine beside its new one
        self.env: dict = {"gpupipe": gpupipe}
        # a block that uses a loader built earlier on its page: ``loader``, ``train_loader``, ``train``, ``val``
        self.env.update({name: Instance(gpupipe.Loader) for name in LOADER_NAMES})
        if partial:  # prose names gpupipe's ops and sources bare: `HorizontalFlip(0.5)`, `FileList(paths)`
            self.env.update({name: getattr(gpupipe, name) for name in gpupipe.__all__ if name[0].isupper()})
        self.problems: list[str] = []
        self.checked_calls = 0

    def fail(self, node, message):
        self.problems.append(f"line {getattr(node, 'lineno', '?')}: {message}")

    # names ------------------------------------------------------------------------------------------
    def visit_Import(self, node):
        for alias in node.names:
            if alias.name.split(".")[0] != "gpupipe":
                continue
            try:
                module = importlib.import_module(alias.name)
            except ImportError as error:
                self.fail(node, f"import {alias.name}: {error}")
                continue
            if alias.asname:
                self.env[alias.asname] = module

    def visit_ImportFrom(self, node):
        if not (node.module or "").startswith("gpupipe"):
            return
        try:
            module = importlib.import_module(node.module)
        except ImportError as error:
            self.fail(node, f"from {node.module} import ...: {error}")
            return
        for alias in node.names:
            try:
                obj = getattr(module, alias.name)
            except AttributeError:
                try:
                    obj = importlib.import_module(f"{node.module}.{alias.name}")
                except ImportError:
                    self.fail(node, f"from {node.module} import {alias.name}: no such name")
                    continue
            self.env[alias.asname or alias.name] = obj

    def bind_targets(self, target, value):
        if isinstance(target, ast.Name):
            if value is None:
                self.env.pop(target.id, None)
            else:
                self.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self.bind_targets(element, None)

    def visit_Assign(self, node):
        value = self.resolve(node.value)
        if passes_through(node):  # model, train = accelerator.prepare(model, train): the same objects back
            return
        for target in node.targets:
            self.bind_targets(target, value)

    def visit_For(self, node):
        self.resolve(node.iter)
        self.bind_targets(node.target, None)
        for statement in node.body + node.orelse:
            self.visit(statement)

    def visit_Expr(self, node):
        self.resolve(node.value)

    def generic_visit(self, node):
        if isinstance(node, ast.expr):
            self.resolve(node)
        else:
            super().generic_visit(node)

    # expressions ----------------------------------------------------------------------------------
    def resolve(self, node):
        """What ``node`` refers to (a gpupipe module, class, function, Instance or Method), or None."""
        if isinstance(node, ast.Name):
            return self.env.get(node.id)
        if isinstance(node, ast.Attribute):
            return self.attribute(node, self.resolve(node.value))
        if isinstance(node, ast.Call):
            return self.call(node)
        for child in ast.iter_child_nodes(node):  # anything else: check what it holds
            if isinstance(child, ast.expr):
                self.resolve(child)
            elif isinstance(child, ast.comprehension):
                self.resolve(child.iter)
                for condition in child.ifs:
                    self.resolve(condition)
            elif isinstance(child, (ast.keyword, ast.arguments)):
                for grandchild in ast.iter_child_nodes(child):
                    if isinstance(grandchild, ast.expr):
                        self.resolve(grandchild)
        return None

    def attribute(self, node, base):
        name = node.attr
        if isinstance(base, Instance):
            if name not in instance_attributes(base.cls):
                self.fail(node, f"{base.cls.__name__} object has no attribute {name!r}")
                return None
            member = inspect.getattr_static(base.cls, name, None)
            if inspect.isfunction(member):
                return Method(base.cls, name)
            return None
        if base is not None and (isinstance(base, ModuleType) or inspect.isclass(base)) and is_gpupipe(base):
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    value = getattr(base, name)
                for warning in caught:
                    moved = re.search(r"moved to ([\w.]+)", str(warning.message))
                    if issubclass(warning.category, DeprecationWarning) and not (moved and moved[1] in self.context):
                        self.fail(node, f"an old name: {warning.message}")
                return value
            except AttributeError:
                try:
                    return importlib.import_module(f"{base.__name__}.{name}")
                except (ImportError, AttributeError):
                    self.fail(node, f"{getattr(base, '__name__', base)} has no attribute {name!r}")
        return None

    def call(self, node):
        target = self.resolve(node.func)
        for argument in node.args:
            self.resolve(argument.value if isinstance(argument, ast.Starred) else argument)
        for keyword in node.keywords:
            self.resolve(keyword.value)
        if target is None or isinstance(target, (Instance, ModuleType)):
            return None
        prefix = []
        if isinstance(target, Method):
            name = f"{target.cls.__name__}.{target.name}"
            obj = getattr(target.cls, target.name)
            prefix = [object()]  # self
        elif callable(target) and is_gpupipe(target):
            name, obj = getattr(target, "__qualname__", repr(target)), target
        else:
            return None
        starred = any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
        if not starred:
            args = prefix + [placeholder(a) for a in node.args]
            kwargs = {k.arg: placeholder(k.value) for k in node.keywords}
            try:
                signature = inspect.signature(obj)
                (signature.bind_partial if self.partial else signature.bind)(*args, **kwargs)
                self.checked_calls += 1
            except TypeError as error:
                self.fail(node, f"{name}{inspect.signature(obj)} does not take {ast.unparse(node)}: {error}")
        cls = None if isinstance(target, Method) else returned_class(obj)
        return Instance(cls) if cls is not None else None


def shown_signature(code: str):
    """``gpupipe.loader(a, b=1, *, c)`` → (the object, the parameters as a ``def``'s arguments)."""
    name, _, params = code.strip().partition("(")
    tree = ast.parse(f"def shown({params}:\n    pass")
    obj = gpupipe
    for part in name.split(".")[1:]:
        obj = getattr(obj, part)
    return obj, tree.body[0].args


def signature_problems(code: str) -> list[str]:
    """How a signature block differs from the object's real signature: names, kinds, defaults."""
    obj, shown = shown_signature(code)
    real = list(inspect.signature(obj).parameters.values())
    positional = shown.posonlyargs + shown.args
    defaults = [None] * (len(positional) - len(shown.defaults)) + list(shown.defaults)
    written = [(a.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, d) for a, d in zip(positional, defaults)]
    written += [(a.arg, inspect.Parameter.KEYWORD_ONLY, d) for a, d in zip(shown.kwonlyargs, shown.kw_defaults)]
    if [w[0] for w in written] != [p.name for p in real]:
        return [f"shows {[w[0] for w in written]}, the parameters are {[p.name for p in real]}"]
    problems = []
    for (arg, kind, default), parameter in zip(written, real):
        if kind != parameter.kind:
            problems.append(f"{arg} is shown as {kind}, is {parameter.kind}")
        shown_default = inspect.Parameter.empty if default is None else eval(ast.unparse(default), {})  # noqa: S307
        if shown_default != parameter.default:
            problems.append(f"{arg}={shown_default!r} shown, the default is {parameter.default!r}")
    return problems


@pytest.mark.parametrize("block", BLOCKS, ids=IDS)
def test_block_holds_against_the_api(block: Block):
    where = f"{block.page}:{block.line}"
    if block.signature:
        problems = signature_problems(block.code)
        assert not problems, f"{where}: " + "; ".join(problems)
        return
    try:
        tree = ast.parse(block.code, filename=where)
    except SyntaxError as error:
        pytest.fail(f"{where}: the block does not parse: {error}")
    checker = Checker()
    for statement in tree.body:
        checker.visit(statement)
    assert not checker.problems, f"{where}:\n" + "\n".join(checker.problems)


SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
#: An inline span that names the API: ``gpupipe.<name>``, a loader's method, an op, a source.
API_SPAN = re.compile(
    rf"\bgpupipe\.\w|\b(?:{'|'.join(LOADER_NAMES)})\.\w+\(|\b(?:loader|train_loader|val_loader)\.\w|^[A-Z]\w+\("
)


#: The loggers' names (`gpupipe.skipped`), which prose names as they are, not as attributes.
LOGGERS = {
    name
    for path in (ROOT / "gpupipe").rglob("*.py")
    for name in re.findall(r"getLogger\(\"([\w.]+)\"\)", path.read_text())
}


#: Pages whose tables set torchvision's and timm's transforms, named bare, beside gpupipe's ops.
TORCHVISION_PAGES = {"torchvision.md"}


def inline_spans(page: Path) -> list[tuple[int, str]]:
    """``(line, code)`` of the page's inline code spans (outside fenced blocks) that parse and name the API."""
    text = re.sub(
        r"^[ \t]*```.*?^[ \t]*```", lambda m: "\n" * m.group(0).count("\n"), page.read_text(), flags=re.S | re.M
    )
    spans = []
    for match in SPAN.finditer(text):
        code = match.group(1)
        if not API_SPAN.search(code) or code in LOGGERS:
            continue
        bare = re.match(r"[A-Z]", code) is not None
        if bare and (page.name in TORCHVISION_PAGES or re.search(r"(torchvision|timm)'s\s*$", text[: match.start()])):
            continue  # torchvision's `RandomErasing(value=0)`, not gpupipe's
        try:
            ast.parse(code)
        except SyntaxError:
            continue  # prose such as `gpupipe.loader(...)`'s or a shell line
        spans.append((text.count("\n", 0, match.start()) + 1, code))
    return spans


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_inline_code_names_the_api_as_it_is(page: Path):
    """An inline span such as `gpupipe.DataLoader(dataset, batch_size=256, num_workers=8)` or
    `loader.skip(n)`: every name exists and every keyword is one the object takes (arguments may be
    left out, as prose abbreviates)."""
    problems, lines = [], page.read_text().splitlines()
    for line, code in inline_spans(page):
        checker = Checker(partial=True, context=" ".join(lines[line - 1 : line + 1]))  # a span wraps
        for statement in ast.parse(code).body:
            checker.visit(statement)
        problems += [f"{page.name}:{line}: `{code}`: {problem}" for problem in checker.problems]
    assert not problems, "\n".join(problems)


def test_the_checker_catches_a_stale_block():
    """The checker itself: a wrong argument, a removed name and a missing loader attribute are each caught."""
    code = (
        "from gpupipe import Nope\n"
        "loader = gpupipe.loader('data', 'train', batch=256)\n"
        "loader.set_epoch(1, 2)\n"
        "print(loader.epochs)\n"
        "gpupipe.presets.trian(224)\n"
    )
    checker = Checker()
    for statement in ast.parse(code).body:
        checker.visit(statement)
    assert [p.split(":")[0] for p in checker.problems] == ["line 1", "line 2", "line 3", "line 4", "line 5"]
    signature = block_holding("loader.md", "pipeline=None, *, batch_size").code
    assert signature_problems(signature) == []
    assert signature_problems(signature.replace("seed=0", "seed=1")) == ["seed=1 shown, the default is 0"]
    assert signature_problems(signature.replace("source, pipeline=None, *,", "source, *, pipeline=None,"))[
        0
    ].startswith("pipeline is shown as KEYWORD_ONLY")
    assert "the parameters are" in signature_problems(signature.replace("seed=0, ", ""))[0]
    good = Checker()
    for statement in ast.parse("loader = gpupipe.loader('d', 'train', batch_size=8)\nloader.set_epoch(1)\n").body:
        good.visit(statement)
    assert not good.problems and good.checked_calls == 2


# -- the most important blocks, run as written on tiny data ---------------------------------------------

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SMALL_BATCH = 8


def block_holding(page: str, text: str) -> Block:
    """The one block of ``page`` that holds ``text``."""
    found = [b for b in BLOCKS if b.page == page and text in b.code]
    assert len(found) == 1, f"{page}: {len(found)} Python blocks hold {text!r}"
    return found[0]


def cpu_gpupipe(monkeypatch) -> ModuleType:
    """``gpupipe`` as a block imports it, whose loaders run on the CPU (torchvision) with batches of 8."""
    proxy = ModuleType("gpupipe")
    proxy.__dict__.update({name: getattr(gpupipe, name) for name in gpupipe.__all__})
    real_loader, real_dataloader = gpupipe.loader, gpupipe.DataLoader

    def loader(source, pipeline=None, **options):
        options.update(backend="torchvision", device="cpu", batch_size=min(options["batch_size"], SMALL_BATCH))
        return real_loader(source, pipeline, **options)

    def DataLoader(dataset, *args, **options):  # noqa: N802 -- the documented name
        options.update(backend="torchvision", device="cpu", batch_size=min(options["batch_size"], SMALL_BATCH))
        return real_dataloader(dataset, *args, **options)

    proxy.loader, proxy.DataLoader = loader, DataLoader
    monkeypatch.setitem(__import__("sys").modules, "gpupipe", proxy)
    return proxy


def run_block(block: Block, paths: dict, namespace: dict) -> dict:
    """Runs the block with each of its quoted paths replaced by the tiny data's path."""
    code = block.code
    for written, real in paths.items():
        assert f'"{written}"' in code, f"{block.page}:{block.line}: no path {written!r} in the block"
        code = code.replace(f'"{written}"', repr(str(real)))
    exec(compile(code, f"{block.page}:{block.line}", "exec"), namespace)  # noqa: S102 -- the page's own block
    return namespace


def first_batch(loader):
    return next(iter(loader))


def check_classification(images, labels, size: int = 224):
    import torch

    assert images.shape == (SMALL_BATCH, 3, size, size) and images.dtype == torch.float32
    assert labels.shape == (SMALL_BATCH,) and labels.dtype == torch.int64


@pytest.fixture
def image_data(tmp_path):
    from helpers import make_image_folder

    make_image_folder(tmp_path / "train", {"cat": 8, "dog": 8})
    make_image_folder(tmp_path / "val", {"cat": 3, "dog": 2}, seed=1)
    return tmp_path


def test_the_quickstart_blocks_run_as_written(image_data, monkeypatch):
    """README's and index.md's swap, index.md's ops list, loader.md's class weights and stats, and the
    presets of pipelines.md: batches of the shapes and dtypes the pages state."""
    import numpy as np
    import torch

    proxy = cpu_gpupipe(monkeypatch)
    train = {"data/train": image_data / "train"}
    for page in ("README.md", "index.md"):
        ns = run_block(block_holding(page, 'gpupipe.loader("data/train", "train"'), train, {})
        check_classification(*first_batch(ns["loader"]))  # "(256, 3, 224, 224) float32 ... (256,) int64"
        assert ns["loader"].classes == ["cat", "dog"] and len(ns["loader"]) == 2
        assert ns["loader"].class_to_idx == {"cat": 0, "dog": 1}  # "work as with ImageFolder"
    ns = run_block(
        block_holding("index.md", "from gpupipe import Decode"), train, {"gpupipe": proxy, "mean": MEAN, "std": STD}
    )
    check_classification(*first_batch(ns["loader"]))
    ns = run_block(block_holding("loader.md", "weights=weights"), train, {})
    assert ns["labels"].shape == (16,) and np.allclose(ns["weights"], 1 / 8)
    check_classification(*first_batch(ns["loader"]))
    seen = []
    run_block(
        block_holding("loader.md", "loader.stats(reset=True)"),
        {},
        {"loader": ns["loader"], "train_step": lambda images, labels: seen.append(len(labels)), "print": seen.append},
    )
    assert seen[0] == SMALL_BATCH and "batches" in str(seen[1])
    ns = run_block(block_holding("pipelines.md", "gpupipe.presets.train(224"), {}, {"gpupipe": proxy})
    images, labels = first_batch(
        proxy.loader(
            image_data / "train",
            gpupipe.presets.train(
                224, auto_augment="rand-m9-n2", color_jitter=0.4, random_erasing=0.25, mixup=0.8, cutmix=1.0
            ),
            batch_size=8,
        )
    )
    assert images.shape == (8, 3, 224, 224) and labels.shape == (8, 2) and labels.dtype == torch.float32


def test_the_torchvision_swap_and_the_ddp_evaluation_run_in_one_process(image_data, monkeypatch):
    """torchvision.md's one-name swap (with its DistributedSampler) and ddp.md's exact evaluation, in a
    process group of one: every validation image counted once."""
    import torch
    import torch.distributed as dist
    import torchvision
    from torchvision import transforms

    proxy = cpu_gpupipe(monkeypatch)
    dist.init_process_group("gloo", init_method=f"file://{image_data / 'rendezvous'}", rank=0, world_size=1)
    try:
        swap = block_holding("torchvision.md", "from gpupipe import DataLoader")
        ns = run_block(
            swap,
            {},
            {
                "torch": torch,
                "torchvision": torchvision,
                "transforms": transforms,
                "traindir": str(image_data / "train"),
                "mean": MEAN,
                "std": STD,
            },
        )
        check_classification(*first_batch(ns["train_loader"]))
        assert len(ns["train_loader"]) == 2
        asked = {"num_workers": 8, "pin_memory": True, "persistent_workers": False, "timeout": 0}
        assert {name: getattr(ns["train_loader"], name) for name in asked} == asked  # "answers torch's attributes"
        for name in ("prefetch_factor", "generator", "collate_fn", "worker_init_fn", "num_threads"):
            getattr(ns["train_loader"], name)
        evaluation = block_holding("ddp.md", "torch.distributed.all_reduce(correct_and_seen)")
        evaluation = Block(
            evaluation.page, evaluation.line, evaluation.code.replace('device="cuda"', 'device="cpu"'), False
        )
        ns = run_block(
            evaluation,
            {"data/val": image_data / "val"},
            {"gpupipe": proxy, "torch": torch, "model": lambda images: torch.zeros(len(images), 2)},
        )
        assert ns["correct_and_seen"][1].item() == 5 and ns["accuracy"] == 3 / 5  # every image once; "cat" is 0
    finally:
        dist.destroy_process_group()


def test_the_source_blocks_run_as_written(tmp_path, monkeypatch):
    """sources.md's prediction on a test folder, targets.md's segmentation and detection blocks."""
    import torch
    import torch.nn.functional as F  # noqa: N812 -- as the page writes it
    from helpers import make_detection_set, write_image

    proxy = cpu_gpupipe(monkeypatch)
    rng = __import__("numpy").random.default_rng(0)
    for i in range(10):
        write_image(tmp_path / "test" / f"{i:02d}.jpg", rng.integers(0, 255, (40, 50, 3), dtype="uint8"))
    ns = run_block(
        block_holding("sources.md", "gpupipe.FileList("),
        {"test": tmp_path / "test"},
        {"gpupipe": proxy, "model": lambda images: torch.zeros(len(images), 4)},
    )
    assert sorted(path for path, _ in ns["rows"]) == [f"{i:02d}.jpg" for i in range(10)]

    from PIL import Image

    voc = tmp_path / "VOC"
    for folder in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
        (voc / folder).mkdir(parents=True)
    for i in range(SMALL_BATCH):
        write_image(voc / "JPEGImages" / f"{i}.jpg", rng.integers(0, 255, (60, 80, 3), dtype="uint8"))
        Image.fromarray(rng.choice([0, 1, 255], (60, 80)).astype("uint8")).save(voc / "SegmentationClass" / f"{i}.png")
    (voc / "ImageSets/Segmentation/train.txt").write_text("".join(f"{i}\n" for i in range(SMALL_BATCH)))
    segmentation = block_holding("targets.md", 'gpupipe.SegmentationFolder("VOC/JPEGImages"')
    ns = run_block(
        segmentation,
        {f"VOC/{p}": voc / p for p in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation/train.txt")},
        {"gpupipe": proxy, "F": F, "model": lambda x: {"out": torch.zeros(len(x), 2, *x.shape[2:])}},
    )
    assert ns["images"].shape == (8, 3, 480, 480) and ns["images"].dtype == torch.float32  # as the comment says
    assert ns["masks"].shape == (8, 480, 480) and ns["masks"].dtype == torch.int64

    images, annotations = make_detection_set(tmp_path / "coco", 6)
    detection = block_holding("targets.md", "gpupipe.DetectionLists(")
    ns = run_block(
        detection,
        {"coco/train2017": images, "annotations/instances_train2017.json": annotations},
        {"gpupipe": proxy, "model": lambda images, targets: {"loss": torch.zeros(())}},
    )
    assert isinstance(ns["images"], list) and all(image.shape[0] == 3 for image in ns["images"])
    assert all(t["boxes"].shape[1] == 4 and t["labels"].min() >= 1 for t in ns["targets"] if len(t["labels"]))


class Interrupted(Exception):
    pass


def test_the_resume_block_continues_where_the_interrupted_run_stopped(image_data, monkeypatch, tmp_path):
    """loader.md's resume block, run as a whole run, as a run killed mid-epoch after a checkpoint, and as
    the run resumed from that checkpoint: the resumed run trains on exactly the batches the whole run had
    left (same images, same crops and flips)."""
    import torch

    proxy = cpu_gpupipe(monkeypatch)
    block = block_holding("loader.md", "loader.load_state_dict(")
    block = Block(block.page, block.line, block.code.replace("step % 1000 == 999", "True"), False)  # every batch

    def run(folder: Path, stop_after=None) -> list:
        folder.mkdir(exist_ok=True)
        monkeypatch.chdir(folder)
        seen = []

        def train_step(images, labels):
            if stop_after is not None and len(seen) == stop_after:
                raise Interrupted
            seen.append((images.clone(), labels.clone()))

        namespace = {
            "gpupipe": proxy,
            "os": __import__("os"),
            "torch": torch,
            "epochs": 2,
            "model": torch.nn.Linear(1, 1),
            "train_step": train_step,
        }
        try:
            run_block(block, {"data/train": image_data / "train"}, namespace)
        except Interrupted:
            pass
        return seen

    whole = run(tmp_path / "whole")
    assert len(whole) == 4  # 2 epochs of 2 batches of 8
    first = run(tmp_path / "interrupted", stop_after=1)  # killed in epoch 0's second batch, after one checkpoint
    assert (tmp_path / "interrupted" / "ckpt.pt").exists()
    resumed = run(tmp_path / "interrupted")  # the same folder: a new process finds the checkpoint
    assert len(first) + len(resumed) == len(whole)
    for (images, labels), (expected_images, expected_labels) in zip(first + resumed, whole):
        assert torch.equal(labels, expected_labels) and torch.equal(images, expected_images)


def test_the_packing_block_packs_and_the_pack_loads(image_data, monkeypatch):
    """packing.md's Python API: the folder packed, and the pack read as the folder was."""
    proxy = cpu_gpupipe(monkeypatch)
    block = block_holding("packing.md", "from gpupipe.pack import")
    block = Block(block.page, block.line, block.code.replace("workers=8", "workers=1"), False)  # 2 shared cores
    printed = []
    ns = run_block(
        block,
        {"data/train": image_data / "train", "packed/train": image_data / "packed"},
        {"gpupipe": proxy, "print": lambda *values: printed.append(values)},
    )
    assert printed == [(16, 0)] and ns["summary"].shards >= 1
    images, labels = first_batch(ns["loader"])
    check_classification(images, labels)
    assert ns["loader"].classes == ["cat", "dog"] and len(ns["loader"]) == 2
    assert gpupipe.pack.is_packed(image_data / "packed")


def test_the_mask_map_block_maps_cityscapes_ids_and_camvid_colours(tmp_path, monkeypatch):
    """targets.md's `mask_map` block on a Cityscapes-shaped and a CamVid-shaped folder of one image each
    (``cityscapesscripts``' label table stood in by four of its rows): masks read as training ids."""
    from collections import namedtuple

    import numpy as np
    import torch
    from helpers import write_image
    from PIL import Image

    Label = namedtuple("Label", "name id trainId")
    table = ModuleType("cityscapesscripts.helpers.labels")
    train_labels = [Label(f"class{i}", 7 + i, i) for i in range(19)]  # ids 7..25 train as 0..18
    table.labels = [Label("unlabeled", 0, 255), *train_labels, Label("license plate", -1, -1)]
    for name in ("cityscapesscripts", "cityscapesscripts.helpers"):
        monkeypatch.setitem(__import__("sys").modules, name, ModuleType(name))
    monkeypatch.setitem(__import__("sys").modules, table.__name__, table)
    proxy = cpu_gpupipe(monkeypatch)

    rng = np.random.default_rng(0)
    city = tmp_path / "cityscapes"
    write_image(
        city / "leftImg8bit/train/aachen/aachen_000000_000019_leftImg8bit.png",
        rng.integers(0, 255, (24, 32, 3), dtype=np.uint8),
    )
    ids = np.array([[0, 7, 7, 7]], np.uint8).repeat(24, 0).repeat(8, 1)  # four stripes of 8 columns
    ids[:, 16:24] = 20  # trains as 13
    (city / "gtFine/train/aachen").mkdir(parents=True)
    Image.fromarray(ids).save(city / "gtFine/train/aachen/aachen_000000_000019_gtFine_labelIds.png")
    camvid = tmp_path / "camvid"
    write_image(camvid / "images/0001TP_006690.png", rng.integers(0, 255, (24, 32, 3), dtype=np.uint8))
    colours = np.array([[(128, 128, 128), (128, 0, 0), (192, 192, 128), (128, 0, 0)]], np.uint8)
    (camvid / "labels").mkdir(parents=True)
    Image.fromarray(colours.repeat(24, 0).repeat(8, 1)).save(camvid / "labels/0001TP_006690_L.png")

    block = block_holding("targets.md", "mask_map=train_id")
    cityscapes_part, camvid_part = block.code.split("\n\n# CamVid")
    paths = {
        "cityscapes/leftImg8bit/train": city / "leftImg8bit/train",
        "cityscapes/gtFine/train": city / "gtFine/train",
    }
    pipeline = [gpupipe.Decode(), gpupipe.Resize((24, 32)), gpupipe.Normalize()]
    for code, where, expected in (
        (cityscapes_part, paths, [255, 0, 13, 0]),
        (
            "# CamVid" + camvid_part,
            {"camvid/images": camvid / "images", "camvid/labels": camvid / "labels"},
            [0, 1, 2, 1],
        ),
    ):
        ns = run_block(Block(block.page, block.line, code, False), where, {"gpupipe": proxy})
        images, masks = first_batch(proxy.loader(ns["source"], pipeline, batch_size=1, shuffle=False))
        assert images.shape == (1, 3, 24, 32) and masks.dtype == torch.int64
        assert masks[0, 0, ::8].tolist() == expected


EXTENSION_SCRIPT = """
import sys, json
import torch
import gpupipe
blocks, folder = json.loads(sys.argv[1]), sys.argv[2]
for name, code in blocks:
    exec(compile(code, name, "exec"), globals())
unit = gpupipe.Normalize(mean=(0, 0, 0), std=(1, 1, 1))

def first(*ops):
    pipeline = [gpupipe.Decode(), gpupipe.Resize((16, 16)), *ops]
    loader = gpupipe.loader(folder, pipeline, batch_size=4, backend="torchvision", device="cpu", shuffle=False)
    return next(iter(loader))[0]

plain, inverted = first(unit), first(Invert(p=1.0), unit)
shifted = first(unit, Shift(amount=1.0))
print(json.dumps({"inverted": torch.allclose(plain + inverted, torch.ones_like(plain), atol=1e-6),
                  "shifted": torch.allclose(shifted, plain + 1.0, atol=1e-6)}))
"""


def test_the_extension_blocks_make_working_ops(image_data):
    """development.md's op of one's own (`Invert`) and batch op (`Shift`), as written, in a fresh process
    (they register themselves): `Invert(p=1.0)` gives 1 - x of the [0, 1] image, `Shift(1.0)` x + 1."""
    import json
    import subprocess
    import sys

    blocks = [
        [f"development.md:{block.line}", block.code]
        for block in (
            block_holding("development.md", "class Invert(Op)"),
            block_holding("development.md", "class Shift"),
        )
    ]
    run = subprocess.run(
        [sys.executable, "-c", EXTENSION_SCRIPT, json.dumps(blocks), str(image_data / "train")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.splitlines()[-1]) == {"inverted": True, "shifted": True}


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # torch's, about this machine's cores
def test_the_fallback_block_reads_a_dataset_as_it_is(monkeypatch):
    """torchvision.md's `fallback="torchvision"` block (CIFAR10 stood in by torchvision's `FakeData` of the
    same images): torch's batches, a warning, and the backend named where the page says."""
    import torch
    import torchvision.transforms as T  # noqa: N812 -- as the page writes it
    from torchvision.datasets import FakeData

    cpu_gpupipe(monkeypatch)
    block = block_holding("torchvision.md", 'fallback="torchvision")')
    namespace = {
        "gpupipe": __import__("sys").modules["gpupipe"],
        "T": T,
        "root": "unused",
        "CIFAR10": lambda root, transform: FakeData(16, (3, 32, 32), 10, transform=transform),
    }
    with pytest.warns(UserWarning, match="fallback='torchvision' reads the FakeData as it is"):
        ns = run_block(block, {}, namespace)
    assert ns["train"].backend == ns["train"].state_dict()["backend"] == "torch-dataset"  # as the page says
    images, labels = first_batch(ns["train"])
    assert images.shape == (SMALL_BATCH, 3, 32, 32) and images.dtype == torch.float32
    assert labels.shape == (SMALL_BATCH,) and labels.dtype == torch.int64 and len(ns["train"]) == 2


@pytest.mark.parametrize(("page", "obj"), [("loader.md", "loader"), ("torchvision.md", "DataLoader")])
def test_the_argument_tables_name_the_real_arguments(page: str, obj: str):
    """loader.md's table of `gpupipe.loader`'s arguments: a row for each argument, and no row for one that
    is gone; torchvision.md's table of torch's DataLoader arguments: a row for each `gpupipe.DataLoader` takes."""
    text = (ROOT / "docs" / page).read_text()
    rows = {name for row in re.findall(r"^\| (`\w+`(?:, `\w+`)*)", text, re.M) for name in re.findall(r"`(\w+)`", row)}
    parameters = set(inspect.signature(getattr(gpupipe, obj)).parameters) - {"options"}
    assert parameters - rows == set(), f"{page}: arguments without a row"
    if page == "loader.md":
        assert rows - parameters == set(), f"{page}: rows for arguments gpupipe.loader does not take"
