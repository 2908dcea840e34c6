"""lm-eval tasks from local files: task YAMLs, folders of them, and names under include_path.

Nothing is downloaded. A task YAML's relative ``dataset_path`` folder and ``data_files`` are
read beside the YAML when they are there (else from the working directory, as lm-eval does).
A task that reads a Hugging Face Hub dataset is an error naming the dataset to download.
Relies on lm-eval 0.4.13's task index (``lm_eval.tasks``), the version range pinned.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lm_eval
from lm_eval.tasks import TaskManager
from lm_eval.tasks._index import Kind
from lm_eval.tasks._yaml_loader import load_yaml

from plugtrain.errors import ConfigError, ConfigIssue

__all__ = ["LOCAL_BUILDERS", "TaskSpecs", "resolve_tasks"]

LOCAL_BUILDERS = frozenset({"json", "csv", "parquet", "text", "arrow", "pandas"})
"""``dataset_path`` values that read local ``data_files`` (Hugging Face datasets' builders)."""

TaskSpecs = tuple[list[str | dict[str, Any]], TaskManager]
"""What ``simple_evaluate`` takes: task names or configs, and the manager that knows them."""

WHERE = "eeh_args.tasks"


def _names(tasks: str | Sequence[str]) -> list[str]:
    written = tasks.split(",") if isinstance(tasks, str) else list(tasks)
    return [name.strip() for name in written if name.strip()]


def _absolute(value: Any, folder: Path) -> Any:
    """``value`` (a path, a list or a split mapping of paths) with paths beside the YAML."""
    if isinstance(value, str):
        beside = folder / value
        return str(beside) if not Path(value).is_absolute() and beside.exists() else value
    if isinstance(value, list):
        return [_absolute(item, folder) for item in value]
    if isinstance(value, dict):
        return {key: _absolute(item, folder) for key, item in value.items()}
    return value


def _hub_problem(name: str, config: dict[str, Any]) -> str:
    dataset = config.get("dataset_path")
    subset = config.get("dataset_name")
    which = f"{dataset!r}" + (f" (subset {subset!r})" if subset else "")
    return (
        f"task {name!r} reads the Hugging Face dataset {which}, which is not on this machine "
        "and is not downloaded: save it locally and give a task YAML reading the local files "
        "(dataset_path: json with dataset_kwargs.data_files, or a local folder) as "
        "eeh_args.tasks or under eeh_args.include_path"
    )


def _is_local(config: dict[str, Any], folder: Path) -> bool:
    dataset = config.get("dataset_path")
    if dataset is None or dataset in LOCAL_BUILDERS:
        return True
    return (folder / dataset).exists() or Path(dataset).exists()


def _local_config(path: Path) -> dict[str, Any]:
    """The task YAML at ``path`` with its local files' paths made absolute."""
    config = load_yaml(path, resolve_func=True)
    folder = path.resolve().parent
    name = str(config.get("task", path))
    if not _is_local(config, folder):
        raise ConfigError([ConfigIssue(WHERE, _hub_problem(name, config))])
    dataset = config.get("dataset_path")
    if isinstance(dataset, str) and dataset not in LOCAL_BUILDERS:
        config["dataset_path"] = _absolute(dataset, folder)
    kwargs = config.get("dataset_kwargs")
    if isinstance(kwargs, dict) and "data_files" in kwargs:
        config["dataset_kwargs"] = {**kwargs, "data_files": _absolute(kwargs["data_files"], folder)}
    return dict(config)


def _builtin_yaml(name: str, key: str) -> Path | None:
    """The first of lm-eval's own task YAMLs with the line ``key: name`` (a text scan).

    Far faster than indexing lm-eval's thousands of task files, which only a diagnosis needs.
    """
    root = Path(lm_eval.__file__).parent / "tasks"
    line = re.compile(rf"^{key}:\s*['\"]?{re.escape(name)}['\"]?\s*$", re.MULTILINE)
    for path in sorted(root.rglob("*.yaml")):
        if line.search(path.read_text(encoding="utf-8", errors="ignore")):
            return path
    return None


def _unknown(names: list[str]) -> ConfigError:
    """Why each name is not runnable: a Hub task, a built-in group, or no task of that name."""
    issues = []
    for name in names:
        task = _builtin_yaml(name, "task")
        if task is not None:
            message = _hub_problem(name, load_yaml(task, resolve_func=False))
        elif _builtin_yaml(name, "group") or _builtin_yaml(name, "tag"):
            message = (
                f"{name!r} is one of lm-eval's built-in groups or tags, whose tasks read Hugging "
                "Face Hub datasets that are not downloaded here: give local task YAMLs instead"
            )
        else:
            message = (
                f"no lm-eval task, group or tag is named {name!r} (give a task YAML file or "
                "folder, or its folder as eeh_args.include_path)"
            )
        issues.append(ConfigIssue(WHERE, message))
    return ConfigError(issues)


def resolve_tasks(tasks: str | Sequence[str], include_path: str | None = None) -> TaskSpecs:
    """The tasks ``eeh_args.tasks`` names, all read from local files.

    :param tasks: names, task YAML files and folders of them (comma-separated or a list).
    :param include_path: a folder of task YAMLs whose names ``tasks`` may use.
    :raises ConfigError: a name no local YAML defines, or a task reading a Hub dataset.
    """
    includes = [Path(include_path)] if include_path else []
    specs: list[str | dict[str, Any]] = []
    names: list[str] = []
    for written in _names(tasks):
        path = Path(written)
        if path.is_file():
            specs.append(_local_config(path))
        elif path.is_dir():
            includes.append(path)
            folder = TaskManager(include_path=str(path), include_defaults=False)
            names.extend(folder.all_subtasks)
        else:
            names.append(written)
    if not specs and not names:
        raise ConfigError([ConfigIssue(WHERE, f"names no task: {tasks!r}")])
    manager = TaskManager(include_path=[str(p) for p in includes] or None, include_defaults=False)
    unknown = []
    for name in names:
        entry = manager.task_index.get(name)
        if entry is None:
            unknown.append(name)
        elif entry.kind is Kind.TASK and entry.yaml_path is not None:
            specs.append(_local_config(entry.yaml_path))
        else:
            specs.append(name)
    if unknown:
        raise _unknown(unknown)
    return specs, manager
