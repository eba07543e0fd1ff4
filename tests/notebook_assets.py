"""Pictures that travel with the notebook: markdown image links to repository files become cell attachments.

Colab, nbviewer, VS Code and a notebook copied on its own cannot follow ``../assets/ch01_pipeline.png``; they
all show a cell attachment. ``embed_assets`` (called by ``refresh_notebooks.py`` on every refresh) turns

    ![alt](../assets/ch01_pipeline.png)   into   ![alt](attachment:ch01_pipeline.png)

with the file's bytes in ``cell.attachments`` and its repository path in the cell's metadata
(``embedded_assets: {"ch01_pipeline.png": "assets/ch01_pipeline.png"}``). ``assets/`` stays the editable
source: every later refresh re-reads the file named there, so a redrawn diagram is re-embedded. To change the
picture of a cell, edit its link back to a path (or edit the file in ``assets/``) and refresh.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

METADATA_KEY = "embedded_assets"
MIME_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
              ".svg": "image/svg+xml"}
# ![alt](target "optional title")  and  <img ... src="target" ...>
MARKDOWN_IMAGE = re.compile(r"(?P<head>!\[[^\]]*\]\(\s*)(?P<target>[^)\s]+)(?P<tail>[^)]*\))")
HTML_IMAGE = re.compile(r"(?P<head><img\b[^>]*?\bsrc\s*=\s*[\"'])(?P<target>[^\"']+)(?P<tail>[\"'])", re.IGNORECASE)
REMOTE = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//|#)", re.IGNORECASE)  # http:, https:, data:, attachment:, ...


def image_targets(markdown: str) -> list[str]:
    """Every image target a markdown cell names (markdown and HTML syntax)."""
    return [m.group("target") for pattern in (MARKDOWN_IMAGE, HTML_IMAGE) for m in pattern.finditer(markdown)]


def is_local_target(target: str) -> bool:
    """A link to a file (``../assets/x.png``), as opposed to ``attachment:``, ``https:`` or ``data:``."""
    return not REMOTE.match(target)


def attachment_name(repository_path: str) -> str:
    """``assets/ch01_pipeline.png`` -> ``ch01_pipeline.png``; a sub-folder joins the name with ``__``."""
    parts = Path(repository_path).parts
    return "__".join(parts[1:] if parts[:1] == ("assets",) and len(parts) > 1 else parts)


def _read_attachment(path: Path) -> dict:
    mime = MIME_TYPES.get(path.suffix.lower())
    if mime is None:
        raise ValueError(f"image {path} has suffix {path.suffix!r}; expected one of {sorted(MIME_TYPES)}")
    if mime == "image/svg+xml":
        return {mime: path.read_text(encoding="utf-8")}
    return {mime: base64.b64encode(path.read_bytes()).decode("ascii")}


def embed_assets(nb, notebook_dir: Path, root: Path) -> int:
    """Embed every local image of ``nb``'s markdown cells as an attachment, in place; return how many.

    ``notebook_dir``: the folder the links are relative to (the notebook's); ``root``: the repository, which every
    linked file must be inside (its path relative to ``root`` is what the cell's metadata records).
    """
    notebook_dir, root = Path(notebook_dir).resolve(), Path(root).resolve()
    count = 0
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        sources = dict(cell.metadata.get(METADATA_KEY, {}))  # attachment name -> path relative to root

        def to_attachment(match: re.Match) -> str:
            target = match.group("target")
            if not is_local_target(target):
                return match.group(0)
            path = (notebook_dir / target).resolve()
            if not path.is_file() or not path.is_relative_to(root):
                raise SystemExit(f"cell {index}: image {target!r} is not a file inside {root} (looked at {path})")
            relative = path.relative_to(root).as_posix()
            name = attachment_name(relative)
            if sources.get(name, relative) != relative:
                raise SystemExit(f"cell {index}: two images would both be attached as {name!r}")
            sources[name] = relative
            return f"{match.group('head')}attachment:{name}{match.group('tail')}"

        source = MARKDOWN_IMAGE.sub(to_attachment, cell.source)
        cell.source = HTML_IMAGE.sub(to_attachment, source)
        used = {t[len("attachment:"):] for t in image_targets(cell.source) if t.startswith("attachment:")}
        sources = {name: path for name, path in sources.items() if name in used}
        attachments = {name: data for name, data in cell.get("attachments", {}).items() if name not in
                       cell.metadata.get(METADATA_KEY, {}) or name in sources}  # drop only our stale ones
        for name, relative in sorted(sources.items()):
            path = root / relative
            if not path.is_file():
                raise SystemExit(f"cell {index}: attachment {name!r} comes from {relative}, which no longer exists")
            attachments[name] = _read_attachment(path)
            count += 1
        if sources:
            cell.metadata[METADATA_KEY] = sources
        else:
            cell.metadata.pop(METADATA_KEY, None)
        if attachments:
            cell["attachments"] = attachments
        else:
            cell.pop("attachments", None)
    return count
