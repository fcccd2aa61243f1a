"""``peregrine inspect ARTIFACT``: what an artifact holds and how it was compiled."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from peregrine.cli._common import check_input_file, human_bytes, naming_file

HELP = "show an artifact's backend, schedule, input schema, methods and versions"
DESCRIPTION = """\
Describe a compiled artifact: source model, backend and device, the strategy/schedule the backend
chose (explain), the input schema (number and names of features), methods, library versions,
content hash and file size. The artifact is verified (every member's hash) before anything is
shown. --json prints the same as one JSON object."""


def add_parser(sub: argparse._SubParsersAction, parents: list) -> None:
    p = sub.add_parser(
        "inspect",
        help=HELP,
        description=DESCRIPTION,
        parents=parents,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("artifact", metavar="ARTIFACT", help="an artifact from 'peregrine compile'")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=run)


def describe(path: str) -> dict[str, Any]:
    """Everything 'inspect' reports, as plain JSON-able data."""
    from peregrine.errors import UnsupportedModelError
    from peregrine.ir.spec import METHOD_NAMES
    from peregrine.runtime.artifact import load_artifact
    from peregrine.runtime.compiled import build

    spec, body, content_hash = load_artifact(path)  # verifies every member's hash
    info: dict[str, Any] = {
        "path": os.path.abspath(path),
        "file_size": os.path.getsize(path),
        "content_hash": content_hash,
        "format": f"{body.get('format')} v{body.get('format_version')}",
        "source": spec.source,
        "backend": body.get("backend"),
        "device": body.get("device"),
        "methods": [m for m in METHOD_NAMES if m in spec.methods],  # public order
        "n_features": spec.n_features,
        "feature_names": list(spec.feature_names) if spec.feature_names else None,
        "categorical_features": sorted(spec.category_maps),
        "allow_nan": spec.allow_nan,
        "allow_inf": spec.allow_inf,
        "classes": _classes(spec),
        "options": body.get("options"),
        "versions": {**dict(spec.versions), **dict(body.get("versions") or {})},
    }
    # The backend's choices exist only once the program is rebuilt; a backend missing on this
    # machine (say, an artifact compiled for 'native' elsewhere) leaves the rest still useful.
    try:
        from peregrine.options import CompileOptions

        options = CompileOptions.from_json(body["options"])
        compiled = build(spec, body["backend"], options, body["device"], content_hash)
        info["explain"] = compiled.explain()
        info["backend_choices"] = compiled.explain_dict()["backend_choices"]
    except UnsupportedModelError as exc:
        info["explain"] = None
        info["backend_choices"] = None
        info["note"] = f"cannot rebuild the program here: {exc}"
    return info


def _classes(spec: Any) -> list | None:
    method = spec.methods.get("predict")
    if method is None or method.labels is None:
        return None
    return [x.item() if hasattr(x, "item") else x for x in method.labels]


def run(args: argparse.Namespace) -> int:
    check_input_file(args.artifact, "artifact")
    with naming_file(args.artifact):
        info = describe(args.artifact)
    if args.json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    names = info["feature_names"]
    schema = f"{info['n_features']} features"
    schema += (
        f", matched by name: {_clip(names)}"
        if names
        else ", matched by position (the model has no feature names)"
    )
    if info["categorical_features"]:
        schema += f"; categorical columns {info['categorical_features']}"
    rows = [
        ("artifact", f"{info['path']} ({human_bytes(info['file_size'])}, {info['format']})"),
        ("content hash", info["content_hash"]),
        ("source model", info["source"]),
        ("backend", f"{info['backend']} on {info['device']}"),
        ("methods", ", ".join(info["methods"])),
        ("input", schema),
        ("missing values", _missing(info)),
    ]
    if info["classes"] is not None:
        rows.append(("classes", _clip([str(c) for c in info["classes"]])))
    rows.append(("options", ", ".join(f"{k}={v}" for k, v in (info["options"] or {}).items())))
    rows.append(("versions", ", ".join(f"{k} {v}" for k, v in info["versions"].items())))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    if info["explain"]:
        print("explain:")
        print("  " + info["explain"].replace("\n", "\n  "))
    else:
        print(f"explain: unavailable ({info['note']})")
    return 0


def _missing(info: dict[str, Any]) -> str:
    accepts = [w for w, ok in (("NaN", info["allow_nan"]), ("inf", info["allow_inf"])) if ok]
    return "accepts " + " and ".join(accepts) if accepts else "rejects NaN and inf"


def _clip(items: list[str], n: int = 12) -> str:
    text = ", ".join(items[:n])
    return text + (f", ... ({len(items) - n} more)" if len(items) > n else "")
